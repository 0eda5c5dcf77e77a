"""Image mode: a pod's containers run from their images with ``buildah run``.

In process mode (the default) a container is a host process that the realiser
points at host paths. In image mode it runs inside its image's file system, as a
container runtime would run it:

- the command is Kubernetes' rule over the image's config (``command`` replaces the
  ENTRYPOINT, ``args`` the CMD), ``$(VAR)``-expanded;
- the image's environment, with the pod's on top (downward API, service links, the
  API server's address); no host PATH or HOME;
- every volume bind-mounted at its ``mountPath`` (ConfigMaps, Secrets and the
  service-account files read-only), so paths are not rewritten — cluster DNS names
  and ``0.0.0.0`` still are, as the pods share this host's network (``--network
  host``), each on its own 127.x address. A ``mountPath`` through a symlink of the
  image (Debian's ``/var/run -> /run``, which the service-account files live under)
  is resolved in the image first, as runc does: buildah's chroot runner mounts onto
  the path as written, and one through a symlink silently lands nowhere;
- the user of ``securityContext.runAsUser``/``runAsGroup`` (container over pod),
  else the image's; ``emptyDir`` volumes are world-writable and claims get the
  pod's ``fsGroup``, as kubelet makes them.

The cost: with buildah, a working container is a copy of the image's root file
system (a full copy under the vfs storage driver, an overlay mount otherwise), so
one working container per image is made, on first use, and every pod of that image
runs in it (``buildah run`` may run many commands in one container at once; what a
pod writes goes to its volumes). They are recorded in ``DIR/containers.jsonl`` and
removed when the realiser stops (or by the harness, if the realiser was killed).

Signals: ``buildah run`` answers SIGTERM by SIGKILLing what it runs, so a graceful
stop signals the container's own processes — the process group minus buildah's
processes — and only SIGKILL goes to the whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketcluster.e2e.images import buildah as bh
from rocketcluster.e2e.images.buildah import ImageInfo
from rocketcluster.e2e.images.tools import CommandFailed, ToolMissing, require
from rocketcluster.e2e.kube import procfs
from rocketcluster.e2e.kube.podenv import ConfigError
from rocketcluster.e2e.kube.substitute import expand_vars

RUNTIMES = ("process", "image")
CONTAINERS_FILE = "containers.jsonl"


class ImageUnavailable(ConfigError):
    """The pod's image is not in buildah's local storage (nothing is pulled here) —
    kubelet's ``ErrImageNeverPull``."""

    reason = "ErrImageNeverPull"


# --- pure ------------------------------------------------------------------------


def image_command(
    container: Mapping[str, Any], image: ImageInfo, env: Mapping[str, str]
) -> list[str]:
    """What runs, by Kubernetes' rule: ``command`` replaces the image's ENTRYPOINT
    (and drops its CMD), ``args`` replace its CMD; ``$(VAR)`` expanded."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    argv = command + args if command else list(image.entrypoint) + (args or list(image.cmd))
    if not argv:
        raise ConfigError(
            f"container {container.get('name')!r}: neither the pod nor the image "
            f"{container.get('image')!r} says what to run"
        )
    return [expand_vars(str(a), dict(env)) for a in argv]


def run_as(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str | None:
    """``uid[:gid]`` from the container's securityContext over the pod's; None: the
    image's user."""
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    own = container.get("securityContext") or {}
    uid = own.get("runAsUser", pod_ctx.get("runAsUser"))
    gid = own.get("runAsGroup", pod_ctx.get("runAsGroup"))
    if uid is None:
        return None
    return f"{int(uid)}:{int(gid)}" if gid is not None else str(int(uid))


def fs_group(pod: Mapping[str, Any]) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if value is None else int(value)


class SymlinkLoop(ConfigError):
    reason = "CreateContainerError"  # kubelet's, when the runtime cannot make the mounts


def resolve_in_root(root: Path, path: str, *, max_links: int = 40) -> str:
    """``path`` as the container sees it once the symlinks of its file system
    (``root`` on the host) are followed — within ``root``: an absolute link target
    starts again at the container's ``/``, ``..`` never climbs above it (what runc's
    securejoin does). Components that do not exist yet are kept as written."""
    todo = deque(part for part in path.split("/") if part)
    done: list[str] = []
    links = 0
    while todo:
        part = todo.popleft()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if not here.is_symlink():
            done.append(part)
            continue
        links += 1
        if links > max_links:
            raise SymlinkLoop(f"mount path {path!r}: more than {max_links} symlinks in the image")
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo.extendleft(reversed([p for p in target.split("/") if p]))
    return "/" + "/".join(done)


def container_name(directory: Path, image: str) -> str:
    """The working container of ``image`` for the realiser of ``directory``: named
    after both, so two realisers on one host never share one."""
    digest = hashlib.sha256(f"{directory.resolve()}\0{image}".encode()).hexdigest()[:10]
    tail = re.sub(r"[^a-zA-Z0-9_.-]+", "-", image.rsplit("/", 1)[-1])[:40]
    return f"rcpod-{digest}-{tail}"


# --- the process group of a `buildah run` -------------------------------------------


def container_processes(pgid: int, buildah_binary: str) -> list[int]:
    """The processes of a ``buildah run``'s group that are the container's own: not
    buildah itself nor its re-executed helpers (chroot runtime, exec), which run the
    buildah binary."""
    try:
        ours = os.stat(buildah_binary)
    except OSError:
        return []
    out = []
    for pid in procfs.group_members(pgid):
        try:
            exe = os.stat(f"/proc/{pid}/exe")
        except OSError:
            continue
        if (exe.st_dev, exe.st_ino) != (ours.st_dev, ours.st_ino):
            out.append(pid)
    return out


# --- the working containers ---------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    host: str
    path: str  # in the container
    read_only: bool


@dataclass(frozen=True)
class WorkingContainer:
    name: str
    image: ImageInfo
    rootfs: Path  # on the host, where the container's "/" is


class ImageRuntime:
    """The realiser's working containers, one per image, made on first use."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.buildah = require("buildah")
        self._containers: dict[str, WorkingContainer] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def record_path(self) -> Path:
        return self.dir / CONTAINERS_FILE

    async def container(self, image: str) -> WorkingContainer:
        """The working container of ``image``, with the image's config."""
        known = self._containers.get(image)
        if known is not None:
            return known
        lock = self._locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image not in self._containers:
                self._containers[image] = await asyncio.to_thread(self._create, image)
        return self._containers[image]

    def _create(self, image: str) -> WorkingContainer:
        info = bh.inspect_image(image)
        if info is None:
            raise ImageUnavailable(
                f"image {image!r} is not in buildah's local storage and nothing is pulled "
                "here: build it (make images) or name a local image"
            )
        name = container_name(self.dir, image)
        bh.remove_container(name)  # left by a realiser of this directory that was killed
        with self.record_path.open("a") as f:
            f.write(json.dumps({"name": name, "image": image}) + "\n")
        try:
            bh.new_container(image, name)
            rootfs = bh.mount_container(name)
        except (CommandFailed, ToolMissing) as exc:
            raise ImageUnavailable(f"no working container of {image!r}: {exc}") from exc
        return WorkingContainer(name, info, rootfs)

    def argv(
        self,
        container: WorkingContainer,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        user: str | None,
        workdir: str | None,
    ) -> list[str]:
        return bh.run_argv(
            container.name,
            list(command),
            user=user,
            volumes=[
                (m.host, resolve_in_root(container.rootfs, m.path), m.read_only) for m in mounts
            ],
            env=env,
            workdir=workdir,
        )

    def terminate(self, pgid: int) -> bool:
        """SIGTERM the container's own processes in ``pgid`` (see the module's
        docstring); False when none is left."""
        pids = container_processes(pgid, self.buildah)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        return bool(pids)

    def close(self) -> None:
        """Remove the working containers (every process in them has stopped)."""
        for container in self._containers.values():
            bh.remove_container(container.name)
        self._containers.clear()
        self.record_path.unlink(missing_ok=True)


def remove_recorded(directory: Path) -> list[str]:
    """Remove the working containers a realiser of ``directory`` recorded (it was
    killed before it could); the names that were still there."""
    path = directory / CONTAINERS_FILE
    if not path.exists():
        return []
    names = set()
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError):
            names.add(str(json.loads(line)["name"]))
    try:
        existing = bh.container_names()
    except (CommandFailed, ToolMissing):
        return []
    left = sorted(names & existing)
    for name in left:
        bh.remove_container(name)
    path.unlink(missing_ok=True)
    return left
