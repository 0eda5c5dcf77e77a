"""ConsumeQueue: per topic/queue index of the commit log, in fixed 20-byte entries.

Each entry (``CQ_UNIT``) is the record's commit-log offset (u64), its size (u32) and
its tags code (u64), so a consumer finds message N of a queue with one lookup. Files
hold ``entries_per_file`` entries, are named by the byte position of their first
entry (RocketMQ's layout), are preallocated and memory-mapped. An entry of size 0 is
empty. Consume queues are derived data: recovery rebuilds them from the commit log.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import shutil
import struct
import threading
from pathlib import Path
from typing import Final, NamedTuple

from rocketcluster.broker.store.errors import StoreError
from rocketcluster.broker.store.files import (
    create_fixed_file,
    fsync_dir,
    offset_name,
    parse_offset_name,
)

CQ_UNIT: Final = struct.Struct(">QIQ")
CQ_UNIT_SIZE: Final = CQ_UNIT.size  # 20
# Size of a placeholder entry: a queue that starts mid-file (a slave copying from its
# master's last segment) fills the slots before its first entry with these, so the
# filled part of a file is always a prefix.
BLANK_ENTRY_SIZE: Final = 0xFFFFFFFF


class CqEntry(NamedTuple):
    physical_offset: int
    size: int
    tags_code: int


class MappedQueueFile:
    __slots__ = ("dirty", "entries", "fd", "mm", "path", "start_index")

    def __init__(self, path: Path, start_index: int, entries: int, fd: int) -> None:
        self.path = path
        self.start_index = start_index
        self.entries = entries
        self.fd = fd
        self.mm = mmap.mmap(fd, entries * CQ_UNIT_SIZE)
        self.dirty = False

    @classmethod
    def create(cls, directory: Path, start_index: int, entries: int) -> MappedQueueFile:
        path = directory / offset_name(start_index * CQ_UNIT_SIZE)
        return cls(path, start_index, entries, create_fixed_file(path, entries * CQ_UNIT_SIZE))

    @property
    def end_index(self) -> int:
        return self.start_index + self.entries

    def size_at(self, index: int) -> int:
        size: int = struct.unpack_from(">I", self.mm, (index - self.start_index) * 20 + 8)[0]
        return size

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self.mm.flush()

    def close(self) -> None:
        with contextlib.suppress(ValueError, BufferError):
            self.mm.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ConsumeQueue:
    """Entries [min_index, max_index) of one topic/queue."""

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self._files: list[MappedQueueFile] = []
        self._starts: list[int] = []
        self.min_index = 0
        self.max_index = 0
        self._lock = threading.Lock()

    # -- loading -------------------------------------------------------------

    def load(self) -> list[Path]:
        """Open existing files and find the end. Returns files that do not fit (for the
        caller to quarantine): wrong names, wrong sizes, or gaps in the sequence."""
        rejected: list[Path] = []
        if not self.directory.exists():
            return rejected
        found: list[tuple[int, Path]] = []
        for path in self.directory.iterdir():
            start_bytes = parse_offset_name(path.name)
            size_ok = path.is_file() and path.stat().st_size == self.entries_per_file * 20
            if start_bytes is None or start_bytes % (self.entries_per_file * 20) or not size_ok:
                rejected.append(path)
                continue
            found.append((start_bytes // CQ_UNIT_SIZE, path))
        found.sort()
        for start, path in found:
            if self._files and start != self._files[-1].end_index:
                rejected.append(path)
                continue
            fd = os.open(path, os.O_RDWR)
            f = MappedQueueFile(path, start, self.entries_per_file, fd)
            self._files.append(f)
            self._starts.append(start)
        if self._files:
            self.max_index = self._find_end()
            first = self._files[0]
            lo, hi = first.start_index, min(first.end_index, self.max_index)
            while lo < hi:
                mid = (lo + hi) // 2
                if first.size_at(mid) == BLANK_ENTRY_SIZE:
                    lo = mid + 1
                else:
                    hi = mid
            self.min_index = lo
        return rejected

    def _find_end(self) -> int:
        """First empty entry after the last file's filled prefix (entries are written in
        order, so a binary search finds it)."""
        while self._files:
            last = self._files[-1]
            lo, hi = last.start_index, last.end_index
            while lo < hi:
                mid = (lo + hi) // 2
                if last.size_at(mid) > 0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > last.start_index or len(self._files) == 1:
                return lo
            # An empty last file (created just before a crash): its predecessor is the end.
            self._files.pop().close()
            self._starts.pop()
            last.path.unlink(missing_ok=True)
        return self.min_index

    # -- writing -------------------------------------------------------------

    def _file_for(self, index: int, create: bool) -> MappedQueueFile:
        i = bisect.bisect_right(self._starts, index) - 1
        if i >= 0 and index < self._files[i].end_index:
            return self._files[i]
        if not create:
            raise StoreError(f"{self.topic}/{self.queue_id}: no file holds entry {index}")
        self.directory.mkdir(parents=True, exist_ok=True)
        start = index - index % self.entries_per_file
        f = MappedQueueFile.create(self.directory, start, self.entries_per_file)
        with self._lock:
            self._files.append(f)
            self._starts.append(start)
        if len(self._files) == 1:
            self.min_index = index
        return f

    def put(self, index: int, physical_offset: int, size: int, tags_code: int) -> None:
        last = self._files[-1] if self._files else None
        if (
            index == self.max_index
            and last is not None
            and last.start_index <= index < last.end_index
        ):
            # The common case: the next entry, in the current file.
            CQ_UNIT.pack_into(
                last.mm, (index - last.start_index) * CQ_UNIT_SIZE, physical_offset, size, tags_code
            )
            last.dirty = True
            self.max_index = index + 1
            return
        if index < self.max_index:
            existing = self.get(index)
            if existing is not None and existing.physical_offset == physical_offset:
                return  # replayed dispatch after recovery
            raise StoreError(
                f"{self.topic}/{self.queue_id}: entry {index} already holds "
                f"{existing}, refusing to overwrite with offset {physical_offset}"
            )
        if index > self.max_index:
            if not self._files:
                # An empty queue may start anywhere (a slave starting mid-stream).
                f = self._file_for(index, create=True)
                for i in range(f.start_index, index):
                    CQ_UNIT.pack_into(
                        f.mm, (i - f.start_index) * CQ_UNIT_SIZE, 0, BLANK_ENTRY_SIZE, 0
                    )
                self.min_index = self.max_index = index
            else:
                raise StoreError(
                    f"{self.topic}/{self.queue_id}: entry {index} leaves a gap after "
                    f"{self.max_index}"
                )
        f = self._file_for(index, create=True)
        CQ_UNIT.pack_into(
            f.mm, (index - f.start_index) * CQ_UNIT_SIZE, physical_offset, size, tags_code
        )
        f.dirty = True
        self.max_index = index + 1
        self.min_index = min(self.min_index, index)

    def put_units(self, index: int, units: list[bytes]) -> None:
        """Put consecutive entries from ``index``, each already packed (``CQ_UNIT``):
        one write when they are the next ones and fit the current file, else one
        ``put`` each (a new file, a replay after recovery, a queue starting late)."""
        last = self._files[-1] if self._files else None
        count = len(units)
        if (
            index == self.max_index
            and last is not None
            and last.start_index <= index
            and index + count <= last.end_index
        ):
            base = (index - last.start_index) * CQ_UNIT_SIZE
            last.mm[base : base + count * CQ_UNIT_SIZE] = (
                units[0] if count == 1 else b"".join(units)
            )
            last.dirty = True
            self.max_index = index + count
            return
        for k, unit in enumerate(units):
            self.put(index + k, *CQ_UNIT.unpack(unit))

    # -- reading -------------------------------------------------------------

    def get(self, index: int) -> CqEntry | None:
        if index < self.min_index or index >= self.max_index:
            return None
        f = self._file_for(index, create=False)
        return CqEntry._make(CQ_UNIT.unpack_from(f.mm, (index - f.start_index) * CQ_UNIT_SIZE))

    def entries(self, index: int, count: int) -> list[CqEntry]:
        """Up to ``count`` entries from ``index`` (fewer at the end of a file)."""
        return [CqEntry._make(t) for t in CQ_UNIT.iter_unpack(self.raw_entries(index, count))]

    def raw_entries(self, index: int, count: int) -> bytes:
        """Up to ``count`` entries from ``index`` as their ``CQ_UNIT`` bytes (fewer at
        the end of a file): for scans that decode many entries at once."""
        if index < self.min_index or index >= self.max_index or count <= 0:
            return b""
        f = self._file_for(index, create=False)
        end = min(index + count, self.max_index, f.end_index)
        base = (index - f.start_index) * CQ_UNIT_SIZE
        return f.mm[base : base + (end - index) * CQ_UNIT_SIZE]

    def last_entry(self) -> CqEntry | None:
        return self.get(self.max_index - 1)

    def _first_index_at_or_after(self, physical_offset: int) -> int:
        """Entries are ordered by commit-log offset: binary search over the indexes."""
        lo, hi = self.min_index, self.max_index
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.get(mid)
            if entry is not None and (
                entry.size == BLANK_ENTRY_SIZE or entry.physical_offset < physical_offset
            ):
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- truncation and retention -------------------------------------------

    def truncate_from_physical(self, physical_offset: int) -> None:
        """Drop entries that point at or after ``physical_offset`` (recovery, HA)."""
        new_max = self._first_index_at_or_after(physical_offset)
        if new_max >= self.max_index:
            return
        index = new_max
        while index < self.max_index:
            f = self._file_for(index, create=False)
            stop = min(self.max_index, f.end_index)
            start_byte = (index - f.start_index) * CQ_UNIT_SIZE
            f.mm[start_byte : (stop - f.start_index) * CQ_UNIT_SIZE] = bytes(
                (stop - index) * CQ_UNIT_SIZE
            )
            f.dirty = True
            index = stop
        self.max_index = new_max
        with self._lock:
            while len(self._files) > 1 and self._files[-1].start_index >= max(
                new_max, self.min_index + 1
            ):
                f = self._files.pop()
                self._starts.pop()
                f.close()
                f.path.unlink(missing_ok=True)
        self.min_index = min(self.min_index, self.max_index)

    def delete_before_physical(self, min_physical: int) -> int:
        """Retention: forget entries pointing below ``min_physical``; remove whole files
        that only hold such entries. Returns the number of files removed."""
        new_min = self._first_index_at_or_after(min_physical)
        removed = 0
        with self._lock:
            while len(self._files) > 1 and self._files[0].end_index <= new_min:
                f = self._files.pop(0)
                self._starts.pop(0)
                f.close()
                f.path.unlink(missing_ok=True)
                removed += 1
        self.min_index = max(self.min_index, new_min)
        if removed:
            fsync_dir(self.directory)
        return removed

    def flush(self) -> None:
        with self._lock:
            files = list(self._files)
        for f in files:
            f.flush()

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files.clear()
            self._starts.clear()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
