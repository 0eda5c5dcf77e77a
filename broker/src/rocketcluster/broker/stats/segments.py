"""SegmentTracker: how many bytes and messages each queue holds in each commit-log
segment, kept up to date incrementally.

Tiering moves segments, so the report needs each queue's share of each one. A full
scan of every consume queue per snapshot would read the whole index every interval;
instead each queue remembers the consume-queue index it has scanned to and each
interval adds only the new entries (one full scan after a start). Entries are decoded
a file-chunk at a time with ``array`` (C-level byte swaps and sums): since a queue's
entries are ordered by commit-log offset, a binary search finds where each segment's
run ends, so the Python work per chunk is per *segment touched*, not per entry.

The scan notices a consume queue that was cut and rewritten (a slave truncated to its
new master's log) by the commit-log offset of the last entry it counted, and then
counts that queue again from the start; segments retention deleted are dropped.
Store times come from the records themselves (the consume queue has none): the first
record of a queue in a segment when the share is first seen, the last one when it
grew — one 76-byte read each.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rocketcluster.broker.store.consumequeue import CQ_UNIT_SIZE, ConsumeQueue

# An entry is 20 bytes: five 32-bit units (offset high, offset low, size, tags high,
# tags low).
_UNITS = CQ_UNIT_SIZE // 4
_SIZE_UNIT = 2
_SWAP = sys.byteorder == "little"

StoreTimeReader = Callable[[int], int | None]
QueueKey = tuple[str, int]


@dataclass(slots=True)
class SegmentShare:
    """One queue's records inside one segment."""

    bytes: int
    messages: int
    first_offset: int
    last_offset: int
    min_store_time: int | None = None
    max_store_time: int | None = None
    max_time_offset: int = -1  # the record max_store_time was read from


@dataclass(slots=True)
class QueueScan:
    scanned_to: int = 0  # consume-queue index: entries below it are counted
    last_offset: int = -1  # commit-log offset of entry scanned_to - 1
    shares: dict[int, SegmentShare] = field(default_factory=dict)  # by segment base


@dataclass(frozen=True, slots=True)
class ShareRow:
    topic: str
    queue_id: int
    segment: int
    share: SegmentShare


class SegmentTracker:
    def __init__(self, segment_size: int, read_store_time: StoreTimeReader) -> None:
        if segment_size <= 0:
            raise ValueError(f"segment_size must be positive, not {segment_size}")
        self.segment_size = segment_size
        self._read_time = read_store_time
        self._scans: dict[QueueKey, QueueScan] = {}

    def reset(self) -> None:
        """Count everything again (this broker's log may have been truncated)."""
        self._scans.clear()

    def advance(self, cq: ConsumeQueue, clog_min: int, budget: int) -> int:
        """Count up to ``budget`` new entries of ``cq`` (entries pointing below
        ``clog_min`` are in deleted segments and skipped); returns how many."""
        key = (cq.topic, cq.queue_id)
        scan = self._scans.get(key)
        if scan is None or not self._still_valid(scan, cq):
            scan = self._scans[key] = QueueScan(scanned_to=cq.min_index)
        start = max(scan.scanned_to, cq.min_index)
        done = 0
        while done < budget and start < cq.max_index:
            data = cq.raw_entries(start, min(budget - done, cq.max_index - start))
            if not data:
                break
            count = self._count(scan, data, clog_min)
            start += count
            done += count
            scan.scanned_to = start
        return done

    def _still_valid(self, scan: QueueScan, cq: ConsumeQueue) -> bool:
        if scan.scanned_to > cq.max_index:
            return False
        if scan.scanned_to <= cq.min_index or scan.last_offset < 0:
            return True  # nothing counted that the queue still has
        entry = cq.get(scan.scanned_to - 1)
        return entry is not None and entry.physical_offset == scan.last_offset

    def _count(self, scan: QueueScan, data: bytes, clog_min: int) -> int:
        units = array("I")
        units.frombytes(data)
        if _SWAP:
            units.byteswap()
        n = len(units) // _UNITS

        def offset(k: int) -> int:
            return units[k * _UNITS] << 32 | units[k * _UNITS + 1]

        size = self.segment_size
        k = 0
        while k < n:
            first = offset(k)
            base = first - first % size
            end = bisect_left(range(n), base + size, lo=k, key=offset)
            if base >= clog_min:
                last = offset(end - 1)
                added = sum(units[k * _UNITS + _SIZE_UNIT : end * _UNITS : _UNITS])
                share = scan.shares.get(base)
                if share is None:
                    scan.shares[base] = SegmentShare(
                        added, end - k, first, last, min_store_time=self._read_time(first)
                    )
                else:
                    share.bytes += added
                    share.messages += end - k
                    share.last_offset = last
            k = end
        scan.last_offset = offset(n - 1)
        return n

    def drop_below(self, clog_min: int) -> None:
        """Forget the shares of segments retention deleted."""
        for scan in self._scans.values():
            for base in [b for b in scan.shares if b < clog_min]:
                del scan.shares[base]

    def keep_only(self, present: Iterable[QueueKey]) -> None:
        """Forget queues that no longer exist (a deleted topic)."""
        keep = set(present)
        for key in [k for k in self._scans if k not in keep]:
            del self._scans[key]

    def __len__(self) -> int:
        """Queues counted."""
        return len(self._scans)

    def rows(self) -> list[ShareRow]:
        """Every share, its store times read where the share grew since last time."""
        return self.rows_of(sorted(self._scans))

    def rows_of(self, keys: Iterable[QueueKey]) -> list[ShareRow]:
        """:meth:`rows` of the queues ``keys`` only (a caller on an event loop asks for
        a part at a time and serves the loop between parts); a queue not counted has
        none."""
        scans = self._scans
        return self._rows_of([(key, scan) for key in keys if (scan := scans.get(key)) is not None])

    def _rows_of(self, scans: list[tuple[QueueKey, QueueScan]]) -> list[ShareRow]:
        out = []
        for (topic, qid), scan in scans:
            for base, share in sorted(scan.shares.items()):
                if share.min_store_time is None:
                    share.min_store_time = self._read_time(share.first_offset)
                if share.max_time_offset != share.last_offset:
                    share.max_store_time = self._read_time(share.last_offset)
                    if share.max_store_time is not None:
                        share.max_time_offset = share.last_offset
                out.append(ShareRow(topic, qid, base, share))
        return out
