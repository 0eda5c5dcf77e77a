"""CommitLog: one append-only stream of records for all topics, in fixed-size segments.

Offsets are byte positions in the stream. Segment files are named by their start
offset and are all ``segment_size`` long (preallocated). The writer is the event-loop
thread; ``flush_to`` may run on a flush thread at the same time, which is why the
segment list is guarded by a lock and why only data below ``flushed_offset`` is ever
deleted.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from rocketcluster.broker.store import record
from rocketcluster.broker.store.errors import (
    CorruptRecordError,
    OffsetRemovedError,
    ReadPastEndError,
    StoreError,
)
from rocketcluster.broker.store.files import (
    create_fixed_file,
    fsync_dir,
    offset_name,
    zero_from,
)
from rocketcluster.broker.store.page_cache import PageCacheReads
from rocketcluster.broker.store.record import MessageToStore

IOV_MAX = 1024


class Segment:
    """One commit-log file: [base, base + size)."""

    __slots__ = ("base", "fd", "path", "size")

    def __init__(self, path: Path, base: int, size: int, fd: int) -> None:
        self.path = path
        self.base = base
        self.size = size
        self.fd = fd

    @classmethod
    def create(cls, directory: Path, base: int, size: int) -> Segment:
        path = directory / offset_name(base)
        return cls(path, base, size, create_fixed_file(path, size))

    @classmethod
    def open(cls, path: Path, base: int, size: int) -> Segment:
        return cls(path, base, size, os.open(path, os.O_RDWR))

    @property
    def end(self) -> int:
        return self.base + self.size

    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position - self.base)

    def pwritev(self, position: int, bufs: list[bytes], total: int) -> None:
        """Write ``bufs`` (``total`` bytes) back to back at ``position``."""
        if len(bufs) > IOV_MAX:
            self.pwrite(position, b"".join(bufs))
            return
        written = os.pwritev(self.fd, bufs, position - self.base)
        if written < total:  # a short write: finish the rest plainly
            self.pwrite(position + written, b"".join(bufs)[written:])

    def pwrite(self, position: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        rel = position - self.base
        while view:
            n = os.pwrite(self.fd, view, rel)
            view = view[n:]
            rel += n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class AppendedRecord(NamedTuple):
    physical_offset: int
    queue_offset: int
    size: int


class CommitLog:
    def __init__(self, directory: Path, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._lock = threading.Lock()
        # write_offset: end of appended records; committed_offset: end of what is in
        # the segment files (page cache); flushed_offset: end of what is fsynced.
        # flushed <= committed <= written; readers never go past committed.
        self.write_offset = 0
        self.committed_offset = 0
        self.flushed_offset = 0
        self._unwritten: list[tuple[int, int, list[bytes]]] = []
        # Next queue offset per (topic, queue id); rebuilt from consume queues on start.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self._topic_bytes: dict[str, bytes] = {}
        # Reads made with ``count_cache``: how many the page cache served.
        self.page_cache = PageCacheReads()

    # -- opening -----------------------------------------------------------------

    def attach(self, segments: list[Segment], write_offset: int) -> None:
        """Adopt segments already checked by recovery, with the recovered end."""
        self._segments = segments
        self._bases = [s.base for s in segments]
        self.write_offset = self.committed_offset = self.flushed_offset = write_offset

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def min_offset(self) -> int:
        return self._segments[0].base if self._segments else self.write_offset

    def set_empty_start(self, offset: int) -> None:
        """Start an empty log at ``offset`` (a new slave copying from its master)."""
        if self._segments:
            raise StoreError("the commit log is not empty")
        if offset % self.segment_size:
            raise StoreError(f"start offset {offset} is not a multiple of the segment size")
        self.write_offset = self.committed_offset = self.flushed_offset = offset

    # -- writing -----------------------------------------------------------------

    def append(
        self, msgs: Sequence[MessageToStore], store_timestamp: int, *, defer_write: bool = False
    ) -> list[AppendedRecord]:
        """Append ``msgs`` atomically: either every record is written or none is.

        Records are encoded into pieces first; segments the batch needs are created
        before anything is written, so a full disk fails the whole batch and leaves the
        log as it was. With ``defer_write`` the pieces wait in memory for ``commit``
        (the flush thread writes them just before its fsync); otherwise they are in
        the page cache when this returns.
        """
        if not msgs:
            return []
        segment_size = self.segment_size
        blank_room = record.END_FILE_MIN_BLANK_LENGTH
        pos = self.write_offset
        # End of the segment holding ``pos``; at a boundary that is a segment to create.
        seg_end = (pos // segment_size + 1) * segment_size
        topic_cache = self._topic_bytes
        offsets = self.queue_offsets
        undo: dict[tuple[str, int], int] = {}
        encode = record.encode_parts
        header = record.HEADER_SIZE
        results: list[AppendedRecord] = []
        new = tuple.__new__  # an AppendedRecord without NamedTuple's Python-level __new__
        chunks: list[tuple[int, int, list[bytes]]] = []
        pieces: list[bytes] = []
        run_start = pos
        for msg in msgs:
            topic_bytes = topic_cache.get(msg.topic)
            if topic_bytes is None:
                topic_bytes = topic_cache[msg.topic] = msg.topic.encode()
            size = header + len(topic_bytes) + len(msg.properties) + len(msg.body)
            if pos + size + blank_room > seg_end:
                if pieces:
                    chunks.append((run_start, pos, pieces))
                    pieces = []
                chunks.append((pos, seg_end, [record.encode_blank(seg_end - pos)]))
                pos = run_start = seg_end
                seg_end += segment_size
            key = (msg.topic, msg.queue_id)
            qoff = offsets.get(key, 0)
            if key not in undo:
                undo[key] = qoff
            offsets[key] = qoff + 1
            encode(pieces, msg, topic_bytes, qoff, pos, store_timestamp)
            results.append(new(AppendedRecord, (pos, qoff, size)))
            pos += size
        chunks.append((run_start, pos, pieces))
        try:
            created = self._create_segments(
                list(range(self._next_segment_base(), seg_end, segment_size))
            )
        except BaseException:
            offsets.update(undo)
            raise
        if defer_write:
            with self._lock:
                self._unwritten.extend(chunks)
                self.write_offset = pos
            return results
        try:
            self._write_chunks(chunks)
        except BaseException:
            offsets.update(undo)
            self._drop_segments(created)
            self._zero_unacknowledged_tail()
            raise
        self.write_offset = self.committed_offset = pos
        return results

    def _write_chunks(self, chunks: list[tuple[int, int, list[bytes]]]) -> None:
        """Write chunks of pieces with pwritev, merging neighbours in one segment (the
        flush thread commits many appends at once)."""
        i = 0
        while i < len(chunks):
            start, end, pieces = chunks[i]
            seg = self._segment_for(start)
            merged = list(pieces)
            i += 1
            while i < len(chunks) and chunks[i][0] == end and end < seg.end:
                merged += chunks[i][2]
                end = chunks[i][1]
                i += 1
            if merged:
                seg.pwritev(start, merged, end - start)

    def commit(self) -> int:
        """Write bytes appended with ``defer_write`` to the segment files; safe to call
        from the flush thread. Returns the committed offset."""
        with self._lock:
            chunks, self._unwritten = self._unwritten, []
            target = self.write_offset
        if chunks:
            self._write_chunks(chunks)
        self.committed_offset = max(self.committed_offset, target)
        return self.committed_offset

    def append_raw(self, offset: int, data: bytes) -> None:
        """Append bytes copied from another commit log (replication) at ``offset``.

        The caller guarantees ``data`` holds whole records; the write never crosses a
        segment boundary except exactly at one.
        """
        if offset != self.write_offset or self._unwritten:
            raise StoreError(f"raw append at {offset}, log ends at {self.write_offset}")
        pos = offset
        view = memoryview(data)
        while view:
            if not self._segments or pos >= self._segments[-1].end:
                self._create_segments([pos - pos % self.segment_size])
            seg = self._segment_for(pos)
            n = min(len(view), seg.end - pos)
            seg.pwrite(pos, view[:n])
            view = view[n:]
            pos += n
        self.write_offset = self.committed_offset = pos

    def _zero_unacknowledged_tail(self) -> None:
        """After a failed write, make sure no complete record is left past the end
        (it would carry queue offsets that are about to be handed out again)."""
        pos = self.write_offset
        if self._segments and self._segments[-1].base <= pos < self._segments[-1].end:
            seg = self._segments[-1]
            # Zeroing needs no new blocks below the old size; if even that fails the
            # records past the end still fail recovery's offset and CRC checks.
            with contextlib.suppress(OSError, StoreError):
                zero_from(seg.fd, pos - seg.base, seg.size, seg.path)

    def _next_segment_base(self) -> int:
        if self._segments:
            return self._segments[-1].end
        return self.write_offset - self.write_offset % self.segment_size

    def _create_segments(self, bases: list[int]) -> list[Segment]:
        created: list[Segment] = []
        try:
            for base in bases:
                seg = Segment.create(self.directory, base, self.segment_size)
                created.append(seg)
                with self._lock:
                    self._segments.append(seg)
                    self._bases.append(base)
        except BaseException:
            self._drop_segments(created)
            raise
        return created

    def _drop_segments(self, segments: list[Segment]) -> None:
        for seg in reversed(segments):
            with self._lock:
                if self._segments and self._segments[-1] is seg:
                    self._segments.pop()
                    self._bases.pop()
            seg.close()
            seg.path.unlink(missing_ok=True)

    # -- flushing ----------------------------------------------------------------

    def flush_to(self, target: int) -> int:
        """fdatasync every segment holding bytes in [flushed_offset, target).

        Safe to call from a flush thread while the loop thread appends: the data written
        before ``target`` was read is covered by the fsync that follows.
        """
        start = self.flushed_offset
        target = min(target, self.committed_offset)
        if target <= start:
            return start
        with self._lock:
            to_sync = [s for s in self._segments if s.end > start and s.base < target]
        for seg in to_sync:
            os.fdatasync(seg.fd)
        self.flushed_offset = target
        return target

    # -- reading -----------------------------------------------------------------

    def _segment_for(self, offset: int) -> Segment:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or offset >= self._segments[i].end:
            raise OffsetRemovedError(offset, self.min_offset)
        return self._segments[i]

    def read(self, offset: int, size: int, *, count_cache: bool = False) -> bytes:
        """Raw bytes of [offset, offset+size); never past the written end.

        ``count_cache``: count whether the page cache held them (for reads that serve
        clients; see page_cache.py), at no extra syscall on a hit.
        """
        if offset < self.min_offset:
            raise OffsetRemovedError(offset, self.min_offset)
        if size < 0 or offset + size > self.committed_offset:
            raise ReadPastEndError(offset, size, self.committed_offset)
        seg = self._segment_for(offset)
        if offset + size <= seg.end:  # the common case: one segment, one read
            if count_cache:
                return self.page_cache.read(seg.fd, size, offset - seg.base)
            return seg.pread(offset, size)
        out = bytearray()
        pos = offset
        while pos < offset + size:
            seg = self._segment_for(pos)
            n = min(offset + size, seg.end) - pos
            out += seg.pread(pos, n)
            pos += n
        return bytes(out)

    def resident(self, offset: int, size: int) -> bool | None:
        """Whether the record at ``offset`` is in the page cache (None: cannot tell,
        or no longer in the log)."""
        try:
            seg = self._segment_for(offset)
        except OffsetRemovedError:
            return None
        return self.page_cache.resident(seg.fd, size, offset - seg.base)

    def read_message(
        self, offset: int, size: int, *, count_cache: bool = False
    ) -> record.StoredMessage:
        data = self.read(offset, size, count_cache=count_cache)
        check = record.check_record(data, 0, offset, self._space_left(offset))
        if check.kind != record.RecordKind.MESSAGE:
            raise CorruptRecordError(offset, check.reason or "not a message record")
        return record.decode(data)

    def first_store_timestamp(self) -> int | None:
        """Store timestamp (ms) of the oldest record still in the log; None while the
        log holds none."""
        return self.store_timestamp(self.min_offset)

    def store_timestamp(self, offset: int) -> int | None:
        """Store timestamp (ms) of the record at ``offset``: one small read; None when
        it is gone or not a record. Safe against a concurrent retention (a head segment
        gone or reopened reads as None, never as another record's time)."""
        if offset < self.min_offset or self.committed_offset - offset < record.HEADER_SIZE:
            return None
        try:
            head = self.read(offset, record.HEADER_SIZE)
        except (OSError, StoreError):
            return None
        return record.header_store_timestamp(head, offset)

    def _space_left(self, offset: int) -> int:
        return self.segment_size - offset % self.segment_size

    def iter_records(
        self, start: int, end: int | None = None, window: int = 8 << 20
    ) -> Iterator[record.StoredMessage]:
        """Decode records from ``start`` (a record boundary) up to ``end``.

        ``window`` must exceed the largest record; reads go in windows of that size.
        """
        stop = self.committed_offset if end is None else min(end, self.committed_offset)
        pos = start
        while pos < stop:
            seg = self._segment_for(pos)
            chunk_end = min(seg.end, stop, pos + window)
            data = seg.pread(pos, chunk_end - pos)
            view = memoryview(data)
            i = 0
            while pos + i < chunk_end:
                check = record.check_record(view, i, pos + i, seg.end - pos - i)
                if check.kind == record.RecordKind.BLANK:
                    i = seg.end - pos
                    break
                if check.kind is None:
                    if check.reason in ("truncated header", "truncated record"):
                        break  # the rest of the record is in the next read
                    raise CorruptRecordError(pos + i, check.reason)
                yield record.decode(view, i)
                i += check.size
            if i == 0:
                raise CorruptRecordError(pos, "record larger than the read window")
            pos += i

    # -- truncation and deletion -------------------------------------------------

    def truncate(self, offset: int) -> list[Segment]:
        """Cut the log at ``offset``: zero the rest of its segment, drop later segments.

        Returns the dropped segments (closed, not yet deleted) so the caller decides
        whether their bytes are quarantined or removed.
        """
        self.commit()
        if offset > self.write_offset:
            raise StoreError(f"cannot truncate at {offset}: the log ends at {self.write_offset}")
        if offset < self.min_offset:
            raise OffsetRemovedError(offset, self.min_offset)
        with self._lock:
            keep = bisect.bisect_left(self._bases, offset)
            dropped = self._segments[keep:]
            del self._segments[keep:]
            del self._bases[keep:]
        for seg in dropped:
            seg.close()
        if self._segments and offset < self._segments[-1].end:
            seg = self._segments[-1]
            zero_from(seg.fd, offset - seg.base, seg.size, seg.path)
            os.fdatasync(seg.fd)
        self.write_offset = self.committed_offset = offset
        self.flushed_offset = min(self.flushed_offset, offset)
        fsync_dir(self.directory)
        return dropped

    def delete_head_segments(self, count: int) -> list[Segment]:
        """Remove the ``count`` oldest segments, never one holding unflushed data or
        the segment currently written to."""
        removed: list[Segment] = []
        with self._lock:
            while (
                len(removed) < count
                and len(self._segments) > 1
                and self._segments[0].end <= self.flushed_offset
                and self._segments[0].end <= self.write_offset
            ):
                removed.append(self._segments.pop(0))
                self._bases.pop(0)
        for seg in removed:
            seg.close()
            seg.path.unlink(missing_ok=True)
        if removed:
            fsync_dir(self.directory)
        return removed

    def close(self) -> None:
        with self._lock:
            for seg in self._segments:
                seg.close()

    def size_bytes(self) -> int:
        return len(self._segments) * self.segment_size
