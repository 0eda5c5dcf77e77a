from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageToStore
from rocketcluster.ctl.testing import small_store_config as small_config

__all__ = ["small_config"]


def message(i: int, *, topic: str = "orders", queues: int = 3, size: int = 100) -> MessageToStore:
    body = (f"message-{i}-".encode() * (size // 8 + 1))[:size]
    return MessageToStore.build(
        topic,
        i % queues,
        body,
        tag="even" if i % 2 == 0 else "odd",
        keys=(f"key-{i}", f"shared-{i % 5}"),
        msg_id=f"ID{i:030d}",
    )


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


# Why a page-cache test cannot run on a machine: a skip would pass it quietly.
NO_NOWAIT = (
    "the test directory's filesystem has no RWF_NOWAIT buffered reads (Linux 4.14+ "
    "on ext4, xfs or btrfs): the page-cache counters cannot tell hits from misses here; "
    "run the tests on such a filesystem (TMPDIR)"
)

PAGE = 4096
EVICT_S = 10.0
COLD_ATTEMPTS = 10


def _cached_pages(fd: int, start: int, end: int) -> list[int]:
    """Offsets of the pages in [start, end) that are in the page cache, from
    ``mincore`` over a mapping that is never touched. (A cache-only read cannot be
    the check: an RWF_NOWAIT read of a missing page answers EAGAIN but starts
    readahead, which brings the page in.)"""
    first = start - start % PAGE
    length = end - first
    if length <= 0:
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap for mincore failed")
    try:
        vector = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
        if libc.mincore(address, length, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return [first + i * PAGE for i, byte in enumerate(vector.raw) if byte & 1]
    finally:
        libc.munmap(address, length)


def evict(fd: int, start: int = 0, end: int | None = None) -> None:
    """Drop [start, end) of ``fd`` from the page cache and make sure it is gone."""
    end = os.fstat(fd).st_size if end is None else end
    start -= start % PAGE  # DONTNEED keeps a page the range only partly covers
    deadline = time.monotonic() + EVICT_S
    while True:
        os.fdatasync(fd)
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        left = _cached_pages(fd, start, end)
        if not left:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the kernel kept {len(left)} page(s) cached after {EVICT_S:.0f} s")
        time.sleep(0.05)
