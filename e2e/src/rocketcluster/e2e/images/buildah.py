"""The few buildah operations the builder, the image test and the realiser's image
mode use. Isolation is always ``chroot``: the OCI runtime cannot run containers on
these machines (``podman run`` fails on their cgroup layout), chroot isolation can.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.e2e.images.tools import CommandFailed, buildah, output, run

ISOLATION = "chroot"


@dataclass(frozen=True)
class ImageInfo:
    """What the builder and the runners read back from a local image."""

    id: str
    size: int  # bytes, uncompressed (the sum of its layers)
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


def parse_inspect(data: Mapping[str, Any]) -> ImageInfo:
    """An :class:`ImageInfo` from ``buildah inspect --type image`` JSON. Pure."""
    config = ((data.get("OCIv1") or {}).get("config")) or {}
    manifest = json.loads(data.get("Manifest") or "{}")
    env = {}
    for item in config.get("Env") or []:
        key, _, value = str(item).partition("=")
        env[key] = value
    return ImageInfo(
        id=str(data.get("FromImageID") or ""),
        size=sum(int(layer.get("size", 0)) for layer in manifest.get("layers") or []),
        labels=dict(config.get("Labels") or {}),
        user=str(config.get("User") or ""),
        env=env,
        entrypoint=list(config.get("Entrypoint") or []),
        cmd=list(config.get("Cmd") or []),
    )


def inspect_image(ref: str) -> ImageInfo | None:
    """The local image ``ref``, or None when there is none by that name."""
    try:
        text = output(buildah("inspect", "--type", "image", ref))
    except CommandFailed:
        return None
    return parse_inspect(json.loads(text))


def import_rootfs(tarball: Path, tag: str, labels: Mapping[str, str], log: Path) -> None:
    """A root filesystem tarball as the image ``tag``."""
    container = run(buildah("from", "--quiet", "scratch"), log=log).strip().splitlines()[-1]
    try:
        run(buildah("add", "--quiet", container, str(tarball), "/"), log=log)
        config = ["config", "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash"]
        for key, value in labels.items():
            config += ["--label", f"{key}={value}"]
        run(buildah(*config, container), log=log)
        run(buildah("commit", "--quiet", "--rm", container, tag), log=log)
    except BaseException:
        with contextlib.suppress(CommandFailed):
            run(buildah("rm", container))
        raise


def remove_image(ref: str) -> bool:
    """Remove an image no longer wanted; one still in use stays (False)."""
    try:
        run(buildah("rmi", ref))
    except CommandFailed:
        return False
    return True


def new_container(image: str, name: str) -> str:
    """A working container of a local image (never pulled): its name."""
    run(buildah("from", "--quiet", "--pull-never", "--name", name, image))
    return name


def mount_container(name: str) -> Path:
    """The working container's root file system on the host (``buildah mount``; the
    vfs driver's is a plain directory). ``buildah rm`` unmounts it."""
    return Path(output(buildah("mount", name)).strip())


def remove_container(name: str) -> None:
    with contextlib.suppress(CommandFailed):
        run(buildah("rm", name))


@contextlib.contextmanager
def working_container(image: str, name: str) -> Iterator[str]:
    """A working container of a local image named ``name`` (one of that name left by
    a run that was killed is replaced), removed when the block ends."""
    remove_container(name)
    new_container(image, name)
    try:
        yield name
    finally:
        remove_container(name)


def container_names() -> set[str]:
    text = output(buildah("containers", "--json"))
    return {str(c.get("containername")) for c in json.loads(text or "[]") or []}


def run_argv(
    container: str,
    command: list[str],
    *,
    network_host: bool = True,
    user: str | None = None,
    volumes: Sequence[tuple[str, str, bool]] = (),
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
) -> list[str]:
    """``buildah run`` of ``command`` in ``container``: the host's network, the
    image's user unless ``user`` says otherwise, ``volumes`` as (host, container
    path, read-only) bind mounts, ``env`` on top of the image's."""
    args = ["run", "--isolation", ISOLATION]
    if network_host:
        args += ["--network", "host"]
    if user:
        args += ["--user", user]
    for host, target, read_only in volumes:
        args += ["--volume", f"{host}:{target}:{'ro' if read_only else 'rw'}"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    if workdir:
        args += ["--workingdir", workdir]
    return buildah(*args, container, "--", *command)
