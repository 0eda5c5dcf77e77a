"""Per-broker volumes (volumes.py) on real loop-mounted ext4: a ballast fills one up
so writes fail with ENOSPC until it goes; a throttled process's fsyncs wait their
turn, and the heal frees it. Root is needed (as for the chaos suite itself): without
it the test fails saying so."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketcluster.ctl.chaos.volumes import (
    BLKIO,
    CGROUP_PREFIX,
    Volumes,
    sweep_cgroups,
    volumes_usable,
)

MIB = 1 << 20


@pytest.fixture
def volumes(tmp_path: Path) -> Iterator[Volumes]:
    problem = volumes_usable()
    assert problem is None, f"the chaos suite's disk faults cannot run here: {problem}"
    made = Volumes(tmp_path / "disks", size=64 * MIB)
    try:
        yield made
    finally:
        assert made.unmount_all() == []


def test_a_ballast_fills_the_volume_and_its_heal_gives_the_room_back(
    volumes: Volumes, tmp_path: Path
) -> None:
    mount = tmp_path / "data" / "broker-0"
    volume = volumes.mount("broker-0", mount)
    assert volume.device.startswith("/dev/loop")
    (mount / "store").mkdir()
    (mount / "store" / "segment").write_bytes(b"x" * MIB)
    volumes.fill("broker-0", 0)
    assert volumes.free_bytes("broker-0") < MIB
    with pytest.raises(OSError) as full:
        (mount / "store" / "more").write_bytes(b"y" * (2 * MIB))
    assert full.value.errno == errno.ENOSPC
    volumes.empty("broker-0")
    (mount / "store" / "more").write_bytes(b"y" * (2 * MIB))
    # The data outlives an unmount: a resumed run mounts the same image again.
    volumes.unmount_all()
    volumes.mount("broker-0", mount)
    assert (mount / "store" / "segment").stat().st_size == MIB


def test_leave_bytes_are_left(volumes: Volumes, tmp_path: Path) -> None:
    volumes.mount("broker-1", tmp_path / "b1")
    volumes.fill("broker-1", 8 * MIB)
    assert 7 * MIB <= volumes.free_bytes("broker-1") <= 9 * MIB


FSYNCS = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
print("ready", flush=True)
sys.stdin.readline()
began = time.monotonic()
for _ in range(6):
    os.write(fd, b"x" * 16384)
    os.fsync(fd)
print(f"{time.monotonic() - began:.3f}", flush=True)
"""


def _fsyncs(path: Path, volumes: Volumes | None, name: str) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-c", FSYNCS, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        if volumes is not None:
            volumes.throttle(name, proc.pid, 2)
            cgroup = BLKIO / f"{CGROUP_PREFIX}{volumes.token}-{name}"
            assert str(proc.pid) in (cgroup / "cgroup.procs").read_text().split()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        seconds = float(proc.stdout.readline())
        proc.wait(timeout=60)
        return seconds
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_throttled_process_waits_for_its_fsyncs_and_the_heal_frees_it(
    volumes: Volumes, tmp_path: Path
) -> None:
    mount = tmp_path / "b2"
    volumes.mount("broker-2", mount)
    began = time.monotonic()
    # Two writes a second allowed: six fsyncs (each at least one write) cannot finish
    # in under two seconds, however idle the machine.
    assert _fsyncs(mount / "slow", volumes, "broker-2") >= 2.0
    assert time.monotonic() - began >= 2.0
    volumes.unthrottle("broker-2")
    assert not (BLKIO / f"{CGROUP_PREFIX}{volumes.token}-broker-2").exists()
    assert os.path.exists(mount / "slow")


def test_the_sweep_removes_only_cgroups_nobody_is_in(volumes: Volumes, tmp_path: Path) -> None:
    stale = BLKIO / f"{CGROUP_PREFIX}deadbeef-broker-9"
    stale.mkdir()
    volumes.mount("broker-3", tmp_path / "b3")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        volumes.throttle("broker-3", sleeper.pid, 5)
        notes = sweep_cgroups(older_than_s=0)
        assert f"removed stale cgroup {stale.name}" in notes
        assert not stale.exists()
        assert (BLKIO / f"{CGROUP_PREFIX}{volumes.token}-broker-3").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        volumes.unthrottle("broker-3")
