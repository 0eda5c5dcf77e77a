"""disks.py on real filesystems: a tmpfs of the size asked for, mounted and gone again;
a ballast that leaves the bytes asked for, tops up, and gives everything back."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rocketcluster.ctl import disks
from rocketcluster.ctl.disks import Ballast, DiskToolError, free_bytes, small_filesystem

MIB = 1 << 20


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines()
    )


def test_small_filesystem_has_its_size_and_goes_away(tmp_path: Path) -> None:
    target = tmp_path / "mnt"
    with small_filesystem(target, 8 * MIB) as mount:
        assert mount == target and _mounted(target)
        assert disks.total_bytes(target) == 8 * MIB
        (target / "file").write_bytes(b"x" * MIB)
        assert free_bytes(target) <= 7 * MIB
    assert not _mounted(target)
    assert not (target / "file").exists()  # the file lived on the tmpfs


def test_small_filesystem_refuses_without_root(tmp_path: Path) -> None:
    """As an unprivileged user (a real one: a child of this process that dropped to
    nobody's uid — no interpreter or checkout it could not read): a clear error,
    nothing mounted."""
    target = tmp_path / "mnt"
    tmp_path.chmod(0o777)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only the call under test, then _exit
        answer = "mounted"
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            with small_filesystem(target, 8 << 20):
                pass
        except DiskToolError as exc:
            answer = f"refused: {exc}"
        except BaseException as exc:  # reported to the parent
            answer = f"failed: {exc!r}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    assert answer.startswith("refused:") and "needs root" in answer, answer
    assert not _mounted(target)


def test_ballast_leaves_what_was_asked_then_gives_it_back(tmp_path: Path) -> None:
    target = tmp_path / "mnt"
    with small_filesystem(target, 16 * MIB):
        before = free_bytes(target)
        with Ballast(target, leave_free=3 * MIB) as ballast:
            free = free_bytes(target)
            assert 3 * MIB - 8192 <= free <= 3 * MIB
            assert ballast.size >= before - 3 * MIB - 8192
            # The filesystem really is that full: 4 MiB more do not fit.
            with pytest.raises(OSError) as caught:
                (target / "more").write_bytes(b"y" * 4 * MIB)
            assert caught.value.errno == errno.ENOSPC
            (target / "more").unlink(missing_ok=True)
            # Someone frees space: fill() tops the ballast up again.
            (target / "small").write_bytes(b"z" * MIB)
            (target / "small").unlink()
            ballast.fill()
            assert free_bytes(target) <= 3 * MIB
        assert not ballast.path.exists()
        assert free_bytes(target) == before


def test_ballast_to_zero_makes_writes_fail(tmp_path: Path) -> None:
    target = tmp_path / "mnt"
    with small_filesystem(target, 4 * MIB):
        with Ballast(target, leave_free=0):
            assert free_bytes(target) == 0
            with pytest.raises(OSError) as caught:
                (target / "one").write_bytes(b"1" * 8192)
            assert caught.value.errno == errno.ENOSPC
        (target / "one").write_bytes(b"1" * 8192)  # room again
