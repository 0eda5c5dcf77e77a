"""A small disk of its own for every broker, so a soak can fill one up or slow it down.

Each broker's data directory is an ext4 filesystem on a loop device (a sparse image
under the run's work directory, kept across a resumed run's sessions). Two faults
use it:

- **disk full**: a ballast file (``rocketcluster.ctl.disks.Ballast``) takes every
  byte but ``leave_bytes`` of the filesystem (reserved by ``fallocate``: instant), so
  the broker meets a full disk exactly as in a pod whose volume ran out; the heal
  deletes the ballast.
- **slow disk**: the broker's store process moves into a blkio cgroup (cgroup v1)
  that throttles writes to its loop device to a few operations per second, so its
  fsyncs stall; the heal moves it back to the root cgroup.

Everything needs root and a kernel with loop devices and the blkio controller; when
one is missing the run says which and how to get it (a skip is not a pass). The
mounts live in the contained run's mount namespace; the cgroups do not (cgroupfs is
the host's), so they are named with our prefix and a token of the run (two runs at
once never share one), removed at the end, and swept at start when a dead run left
them empty.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketcluster.ctl.disks import Ballast, free_bytes

BLKIO = Path("/sys/fs/cgroup/blkio")
CGROUP_PREFIX = "rcchaos-slow-"
BALLAST_NAME = "chaos-ballast"
DEFAULT_SIZE = 2 << 30  # sparse: a soak's broker writes well under 1 GiB in hours


class VolumeError(RuntimeError):
    pass


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise VolumeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def volumes_usable() -> str | None:
    """Why per-broker volumes cannot be made here, or None."""
    if os.geteuid() != 0:
        return "per-broker volumes need root (mount -o loop)"
    for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is missing: apt-get install e2fsprogs mount"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control: the kernel has no loop devices"
    if not (BLKIO / "cgroup.procs").exists():
        return f"no blkio cgroup controller at {BLKIO} (cgroup v1): slow-disk faults need it"
    return None


@dataclass
class Volume:
    name: str
    image: Path
    mountpoint: Path
    device: str = ""  # /dev/loopN once mounted
    ballast: Ballast | None = None
    cgroup: Path | None = None


@dataclass
class Volumes:
    """The broker volumes of one run."""

    images: Path
    size: int = DEFAULT_SIZE
    volumes: dict[str, Volume] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(4))

    # -- life cycle ----------------------------------------------------------------

    def mount(self, name: str, mountpoint: Path) -> Volume:
        """Make (once) and mount ``name``'s filesystem on ``mountpoint``; a resumed
        run mounts the image its earlier session made, data and all."""
        self.images.mkdir(parents=True, exist_ok=True)
        image = self.images / f"{name}.ext4"
        if not image.exists():
            with image.open("wb") as f:
                f.truncate(self.size)
            _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", str(image))
        mountpoint.mkdir(parents=True, exist_ok=True)
        _run("mount", "-o", "loop", str(image), str(mountpoint))
        device = _run("findmnt", "-n", "-o", "SOURCE", str(mountpoint)).strip()
        volume = Volume(name, image, mountpoint, device)
        self.volumes[name] = volume
        # A ballast a killed session left behind (a resumed run heals it).
        Ballast(mountpoint, name=BALLAST_NAME).release()
        return volume

    def unmount_all(self) -> list[str]:
        notes = []
        for volume in self.volumes.values():
            with contextlib.suppress(VolumeError):
                self.unthrottle(volume.name)
            self.empty(volume.name)
            try:
                _run("umount", str(volume.mountpoint))
            except VolumeError as exc:
                notes.append(str(exc))
        self.volumes.clear()
        return notes

    # -- disk full -------------------------------------------------------------------

    def fill(self, name: str, leave_bytes: int) -> int:
        """Reserve every free byte of ``name``'s filesystem but ``leave_bytes``; the
        bytes reserved."""
        volume = self.volumes[name]
        volume.ballast = Ballast(volume.mountpoint, leave_bytes, name=BALLAST_NAME)
        return volume.ballast.fill()

    def empty(self, name: str) -> None:
        volume = self.volumes[name]
        if volume.ballast is not None:
            volume.ballast.release()
            volume.ballast = None

    def free_bytes(self, name: str) -> int:
        return free_bytes(self.volumes[name].mountpoint)

    # -- slow disk -------------------------------------------------------------------

    def throttle(self, name: str, pid: int, write_iops: int) -> None:
        """Move ``pid`` into a cgroup allowing ``write_iops`` writes per second to its
        volume (its fsyncs then wait their turn)."""
        volume = self.volumes[name]
        cgroup = BLKIO / f"{CGROUP_PREFIX}{self.token}-{name}"
        major_minor = _device_number(volume.device)
        for attempt in range(3):
            try:
                cgroup.mkdir(exist_ok=True)
                (cgroup / "blkio.throttle.write_iops_device").write_text(
                    f"{major_minor} {write_iops}\n"
                )
                (cgroup / "cgroup.procs").write_text(f"{pid}\n")
                break
            except FileNotFoundError:
                # Another run's sweep took the cgroup while it was still empty.
                if attempt == 2:
                    raise
        volume.cgroup = cgroup

    def unthrottle(self, name: str) -> None:
        volume = self.volumes[name]
        if volume.cgroup is None:
            return
        _release_cgroup(volume.cgroup)
        volume.cgroup = None


def _device_number(device: str) -> str:
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def _release_cgroup(cgroup: Path) -> None:
    """Move every process back to the root blkio cgroup, then remove ours."""
    with contextlib.suppress(OSError):
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
    with contextlib.suppress(OSError):
        cgroup.rmdir()


def sweep_cgroups(older_than_s: float = 60.0) -> list[str]:
    """Remove the slow-disk cgroups an earlier run left (cgroupfs outlives a run):
    only empty ones made over ``older_than_s`` ago — one holding processes, or just
    made, belongs to a run going on."""
    notes: list[str] = []
    if not BLKIO.is_dir():
        return notes
    for cgroup in BLKIO.glob(f"{CGROUP_PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - cgroup.stat().st_mtime < older_than_s:
                continue
            cgroup.rmdir()  # refused while processes are in it
            notes.append(f"removed stale cgroup {cgroup.name}")
    return notes
