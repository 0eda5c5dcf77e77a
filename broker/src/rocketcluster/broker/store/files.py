"""Fixed-size files: creation with preallocation, durable renames, quarantine.

Preallocating (``posix_fallocate``) every segment when it is created means a full disk
shows up as one clean error at roll time, never as a half-written record, and later
``fdatasync`` calls need not update the file size.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from pathlib import Path

from rocketcluster.broker.store.errors import DiskFullError

OFFSET_NAME_DIGITS = 20


def offset_name(offset: int) -> str:
    """File name for a file starting at ``offset`` (RocketMQ's 20-digit convention)."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def parse_offset_name(name: str) -> int | None:
    if len(name) != OFFSET_NAME_DIGITS or not name.isdigit():
        return None
    return int(name)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, offset: int, length: int, path: Path) -> None:
    """Reserve blocks for [offset, offset+length); zero-filled on every filesystem."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(str(path), length) from exc
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            # Filesystems without fallocate: a sparse extension still reads as zeros.
            end = offset + length
            if os.fstat(fd).st_size < end:
                os.ftruncate(fd, end)
            return
        raise


def create_fixed_file(path: Path, size: int) -> int:
    """Create ``path`` with ``size`` zeroed, reserved bytes and return an O_RDWR fd.

    On failure nothing is left behind, so a full disk never leaves a short file that the
    next start would have to explain.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        preallocate(fd, 0, size, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        raise
    fsync_dir(path.parent)
    return fd


def zero_from(fd: int, position: int, size: int, path: Path) -> None:
    """Make bytes [position, size) read as zeros: drop them, then reserve them again."""
    os.ftruncate(fd, position)
    preallocate(fd, position, size - position, path)


def is_all_zero(path: Path, chunk: int = 1 << 20) -> bool:
    with path.open("rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                return True
            if data.count(0) != len(data):
                return False


def quarantine(path: Path, quarantine_dir: Path, reason: str) -> Path:
    """Move ``path`` aside with a note of why, so nothing is ever silently dropped."""
    quarantine_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = quarantine_dir / f"{path.parent.name}-{path.name}-{stamp}"
    n = 0
    while target.exists():
        n += 1
        target = quarantine_dir / f"{path.parent.name}-{path.name}-{stamp}-{n}"
    os.replace(path, target)
    note = {"original": str(path), "reason": reason, "time": time.time()}
    target.with_name(target.name + ".reason.json").write_text(json.dumps(note, indent=2))
    fsync_dir(path.parent)
    fsync_dir(quarantine_dir)
    return target


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file, fsync it, rename over ``path``, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(str(path), len(data)) from exc
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
