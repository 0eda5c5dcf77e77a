"""Page-cache reads: were the commit-log bytes a reader asked for already in memory?

Measured, not guessed: the read itself goes out as ``preadv(..., RWF_NOWAIT)``, which
Linux serves from the page cache only; when any part of the range would need the disk
it answers EAGAIN (nothing cached at the start) or a short count (the rest is not).
Such a read counts as a miss and the missing part is read normally. A hit therefore
costs what a plain ``pread`` costs plus one copy of the bytes; a miss one extra
syscall next to a disk read that costs far more.

Where buffered RWF_NOWAIT reads are not available (tmpfs answers EOPNOTSUPP, kernels
before 4.14 EINVAL, other systems have no ``os.RWF_NOWAIT``) measuring turns itself
off: nothing is counted rather than something invented.
"""

from __future__ import annotations

import errno
import os
import threading

_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})
# Reads up to this size get a buffer of their own. Larger ones (replication batches)
# share one that is kept: a fresh buffer of a few hundred KiB comes from new pages
# every time, and faulting them in costs ten times the read.
SMALL_READ = 128 << 10


class PageCacheReads:
    """Counts of measured reads; plain ints written by the reading thread and read by
    the metrics scrape (no lock: a counter read mid-update is one read behind)."""

    __slots__ = ("_big", "_big_lock", "hits", "misses", "supported")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.supported = _NOWAIT is not None and hasattr(os, "preadv")
        self._big = bytearray()
        self._big_lock = threading.Lock()

    def probe(self, fd: int) -> None:
        """Find out now whether ``fd``'s filesystem can tell (one byte read), so that
        a filesystem that cannot never shows counts at all."""
        if self.supported and _NOWAIT is not None:
            try:
                os.preadv(fd, (bytearray(1),), 0, _NOWAIT)
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno in _UNSUPPORTED:
                    self.supported = False

    def read(self, fd: int, length: int, position: int) -> bytes:
        """``os.pread(fd, length, position)``, counting a hit or a miss."""
        if not self.supported or length <= 0:
            return os.pread(fd, length, position)
        if length <= SMALL_READ:
            return self._read_into(bytearray(length), fd, length, position)
        with self._big_lock:
            if len(self._big) < length:
                self._big = bytearray(length)
            return self._read_into(memoryview(self._big)[:length], fd, length, position)

    def resident(self, fd: int, length: int, position: int) -> bool | None:
        """Whether the page cache holds the first bytes of the range (up to a page:
        enough to tell a message that was read or written lately from one that went
        to disk long ago); None when this filesystem cannot tell. Counts nothing."""
        if not self.supported or _NOWAIT is None or length <= 0:
            return None
        probe = bytearray(min(length, 4096))
        try:
            got = os.preadv(fd, (probe,), position, _NOWAIT)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                return None
            raise
        return got == len(probe)

    def _read_into(self, buf: bytearray | memoryview, fd: int, length: int, position: int) -> bytes:
        if _NOWAIT is None:
            return os.pread(fd, length, position)
        try:
            got = os.preadv(fd, (buf,), position, _NOWAIT)
        except BlockingIOError:
            got = 0
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            self.supported = False  # this filesystem cannot tell: stop asking
            return os.pread(fd, length, position)
        if got == length:
            self.hits += 1
            return bytes(buf)
        rest = os.pread(fd, length - got, position + got)
        if rest:  # bytes the cache did not hold (nothing at all: the end of the file)
            self.misses += 1
        return bytes(buf[:got]) + rest if got else rest
