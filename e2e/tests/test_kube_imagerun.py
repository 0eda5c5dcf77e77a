"""The realiser's image mode, as pure functions and file-system rules: what runs (the
pod's command over the image's entry point), as whom, where a mount lands inside an
image whose paths go through symlinks, how volumes are opened to a non-root user,
and which processes of a ``buildah run`` are the container's own. The whole mode
runs for real in ``e2e/k8s/test_image_pods.py``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.e2e.images.buildah import ImageInfo
from rocketcluster.e2e.kube import volumes
from rocketcluster.e2e.kube.imagerun import (
    SymlinkLoop,
    container_name,
    container_processes,
    fs_group,
    image_command,
    resolve_in_root,
    run_as,
)
from rocketcluster.e2e.kube.podenv import ConfigError

IMAGE = ImageInfo(
    id="sha256:1",
    size=1,
    entrypoint=["rocketcluster-broker"],
    cmd=["--config", "/etc/rocketcluster/broker.json"],
)


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({}, ["rocketcluster-broker", "--config", "/etc/rocketcluster/broker.json"]),
        ({"args": ["--config", "$(CONF)"]}, ["rocketcluster-broker", "--config", "/c.json"]),
        ({"command": ["rocketctl"]}, ["rocketctl"]),  # command drops the image's CMD too
        ({"command": ["rocketctl"], "args": ["topic", "list"]}, ["rocketctl", "topic", "list"]),
    ],
)
def test_the_command_follows_kubernetes_rule_over_the_image(
    container: dict[str, Any], argv: list[str]
) -> None:
    assert image_command(container, IMAGE, {"CONF": "/c.json"}) == argv


def test_nothing_to_run_is_a_config_error_naming_the_image() -> None:
    bare = ImageInfo(id="sha256:2", size=1)
    with pytest.raises(ConfigError, match="localhost/bare:1"):
        image_command({"name": "main", "image": "localhost/bare:1"}, bare, {})


def test_the_user_comes_from_the_container_over_the_pod_else_the_image() -> None:
    pod: dict[str, Any] = {"spec": {"securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}}
    assert run_as(pod, {}) == "10001:10001"
    assert run_as(pod, {"securityContext": {"runAsUser": 0}}) == "0:10001"
    assert run_as({"spec": {}}, {"securityContext": {"runAsUser": 7}}) == "7"
    assert run_as({"spec": {}}, {}) is None
    assert fs_group(pod) is None
    assert fs_group({"spec": {"securityContext": {"fsGroup": 10001}}}) == 10001


def test_working_containers_are_per_realiser_and_image(tmp_path: Path) -> None:
    one = container_name(tmp_path / "a", "localhost/rocketcluster-broker:0.1.0")
    assert one.startswith("rcpod-") and one.endswith("-rocketcluster-broker-0.1.0")
    assert one == container_name(tmp_path / "a", "localhost/rocketcluster-broker:0.1.0")
    assert one != container_name(tmp_path / "b", "localhost/rocketcluster-broker:0.1.0")
    assert one != container_name(tmp_path / "a", "localhost/rocketcluster-broker:0.1.1")


# --- mount paths inside the image -------------------------------------------------


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """A root file system shaped like Debian's: /var/run -> /run (absolute), a
    relative link, a link that climbs out, and a loop."""
    root = tmp_path / "rootfs"
    for d in ("run", "var", "usr/lib", "opt/app"):
        (root / d).mkdir(parents=True)
    (root / "var" / "run").symlink_to("/run")
    (root / "lib").symlink_to("usr/lib")
    (root / "opt" / "current").symlink_to("app")
    (root / "opt" / "escape").symlink_to("../../../../etc")
    (root / "loop").symlink_to("/loop")
    return root


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        (
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "/run/secrets/kubernetes.io/serviceaccount",
        ),
        ("/etc/rocketcluster", "/etc/rocketcluster"),  # missing parts stay as written
        ("/lib/x", "/usr/lib/x"),
        ("/opt/current/data", "/opt/app/data"),
        ("/opt/escape/passwd", "/etc/passwd"),  # never above the container's /
        ("/var/../run/./x/", "/run/x"),
    ],
)
def test_a_mount_path_is_resolved_through_the_image_s_symlinks(
    rootfs: Path, path: str, resolved: str
) -> None:
    assert resolve_in_root(rootfs, path) == resolved


def test_a_symlink_loop_is_refused(rootfs: Path) -> None:
    with pytest.raises(SymlinkLoop, match="/loop/x"):
        resolve_in_root(rootfs, "/loop/x")


# --- volumes for a non-root container -----------------------------------------------


def test_an_empty_dir_is_world_writable_and_a_claim_gets_the_fs_group(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o755)
    volumes.open_to_pod({"name": "tmp", "emptyDir": {}}, scratch, 10001)
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o777

    claim = tmp_path / "claim"
    (claim / "store").mkdir(parents=True)
    (claim / "store" / "00000000").write_bytes(b"x")
    os.chmod(claim / "store" / "00000000", 0o600)
    volumes.open_to_pod({"name": "data", "persistentVolumeClaim": {}}, claim, 4321)
    for path in (claim, claim / "store"):
        assert path.stat().st_gid == 4321 and path.stat().st_mode & 0o2070 == 0o2070
    segment = (claim / "store" / "00000000").stat()
    assert segment.st_gid == 4321 and stat.S_IMODE(segment.st_mode) == 0o660

    # OnRootMismatch: a root that already has the group is left as it is
    (claim / "later").write_bytes(b"y")
    os.chmod(claim / "later", 0o600)
    volumes.open_to_pod({"name": "data", "persistentVolumeClaim": {}}, claim, 4321)
    assert stat.S_IMODE((claim / "later").stat().st_mode) == 0o600


def test_configmaps_secrets_and_projections_are_read_only() -> None:
    for kind in ("configMap", "secret", "downwardAPI", "projected"):
        assert volumes.read_only({"name": "v", kind: {}})
    assert not volumes.read_only({"name": "v", "emptyDir": {}})
    assert not volumes.read_only({"name": "v", "persistentVolumeClaim": {"claimName": "c"}})


# --- which processes are the container's ---------------------------------------------


def test_the_container_s_processes_are_the_group_minus_the_runner(tmp_path: Path) -> None:
    """A stand-in for ``buildah run``: a Python runner (playing buildah) whose group
    also holds a ``sleep`` (the container's process). Only the sleep is the
    container's: the runner is recognised by its executable, as buildah is."""
    runner = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '60'])"],
        start_new_session=True,
    )
    try:
        deadline = 50
        found: list[int] = []
        while deadline and not found:
            found = container_processes(runner.pid, sys.executable)
            if not found:
                deadline -= 1
                subprocess.run(["sleep", "0.1"], check=True)
        assert len(found) == 1 and found[0] != runner.pid
        assert Path(f"/proc/{found[0]}/cmdline").read_bytes().startswith(b"sleep\0")
        assert container_processes(runner.pid, str(tmp_path / "no-such-runner")) == []
    finally:
        os.killpg(runner.pid, 9)
        runner.wait()
