"""Small real filesystems for tests and chaos runs: a tmpfs of a given size mounted on
a directory (``small_filesystem``), and a ``Ballast`` that fills a filesystem until
only N bytes are left free, then gives the space back.

Mounting needs root (CAP_SYS_ADMIN): without it ``small_filesystem`` raises
``DiskToolError`` saying so — a test that needs a full disk must not pass without one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20  # the ballast writes a MiB at a time


class DiskToolError(RuntimeError):
    pass


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (what the
    broker's store judges by: statvfs f_bavail)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def total_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def small_filesystem(directory: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` on ``directory`` (created if missing) for the
    duration of the block; unmounted (lazily, should a process still hold a file
    there) at exit. Root only."""
    if os.geteuid() != 0:
        raise DiskToolError(
            f"mounting a {size_bytes}-byte tmpfs on {directory} needs root "
            "(CAP_SYS_ADMIN): run this as root"
        )
    if size_bytes < 4096:
        raise DiskToolError(f"a tmpfs of {size_bytes} bytes is too small (at least 4096)")
    directory.mkdir(parents=True, exist_ok=True)
    mounted = _run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)])
    if mounted.returncode != 0:
        raise DiskToolError(f"cannot mount a tmpfs on {directory}: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        unmounted = _run(["umount", str(directory)])
        if unmounted.returncode != 0:
            _run(["umount", "-l", str(directory)])


class Ballast:
    """A file filling ``directory``'s filesystem so that ``leave_free`` bytes stay
    available: ``fill()`` (again, to top up after others freed space), ``release()``
    removes it. A context manager: filled on entry, released on exit."""

    def __init__(self, directory: Path, leave_free: int = 0, name: str = ".ballast") -> None:
        self.path = directory / name
        self.leave_free = max(0, leave_free)
        self.size = 0

    def fill(self) -> int:
        """Grow the ballast until at most ``leave_free`` bytes are free (or the
        filesystem refuses more); its size afterwards."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            excess = free_bytes(self.path.parent) - self.leave_free
            if excess > 0:
                # Reserved at once where the filesystem can (ext4, tmpfs): a chaos
                # fault fills gigabytes in milliseconds. What is left, by writing.
                with contextlib.suppress(OSError):
                    os.posix_fallocate(fd, size, excess)
                size = os.fstat(fd).st_size
            block = b"\xa5" * CHUNK
            while True:
                excess = free_bytes(self.path.parent) - self.leave_free
                if excess <= 0:
                    break
                want = min(CHUNK, excess)
                try:
                    written = os.pwrite(fd, block[:want], size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                if written <= 0:
                    break
                size += written
            os.fsync(fd)
        finally:
            os.close(fd)
        self.size = size
        return size

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.size = 0

    def __enter__(self) -> Ballast:
        self.fill()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
