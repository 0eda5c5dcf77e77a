"""Uploading: the master copies each queue's confirmed messages to the tier.

Only consume-queue entries are uploaded, and consume queues hold only what the
in-sync replicas confirmed (DESIGN §4), so whatever reaches the tier is the same on
every replica and a failover cannot take it back. Each queue is a chain of segments
that starts where the backend says the previous one ends:

- a segment's name is its start offset and it is written create-only, so two masters
  (or one retrying a write whose answer was lost) can never both write it;
- a write that fails or times out is not trusted either way: the next try writes the
  same name again, and if the first try did land the backend refuses the second and
  the uploader adopts what is there (reading its header) — no gap, no duplicate;
- a queue whose oldest local data is newer than its tier's end (the data was deleted
  while tiering was off) starts its chain again at the oldest local message, and says
  so: what is gone is gone, but nothing present is skipped.

Blocking work (reading the records, encoding, the backend call) runs on worker
threads; the catalogue changes on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.consumequeue import BLANK_ENTRY_SIZE, ConsumeQueue, CqEntry
from rocketcluster.broker.tiered.backend import BackendError, ObjectExists, TierBackend
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.policy import Batch, plan_batch
from rocketcluster.broker.tiered.segment import SegmentHeader, encode_segment

log = logging.getLogger(__name__)

ENTRIES_PER_READ = 4096


@dataclass
class UploadCounters:
    segments: int = 0
    messages: int = 0
    bytes: int = 0
    adopted: int = 0  # segments found already written (an earlier try, another master)
    errors: int = 0
    last_error: str = ""
    seconds: float = 0.0  # spent in backend writes


@dataclass
class QueueProgress:
    """Where a queue's next segment starts, and since when data waits there."""

    begin: int
    since: float
    restarted_at: list[tuple[int, int]] = field(default_factory=list)  # holes we had to leave


class Uploader:
    def __init__(
        self,
        store: MessageStore,
        catalog: TierCatalog,
        backend: TierBackend,
        *,
        batch_bytes: int,
        interval_s: float,
        writer: str,
        concurrency: int = 4,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.backend = backend
        self.batch_bytes = batch_bytes
        self.interval_s = interval_s
        self.writer = writer
        self.counters = UploadCounters()
        self._progress: dict[tuple[str, int], QueueProgress] = {}
        self._limit = asyncio.Semaphore(concurrency)

    def begin_of(self, cq: ConsumeQueue) -> int:
        """The first queue offset of ``cq`` the tier does not hold."""
        tier = self.catalog.get(cq.topic, cq.queue_id)
        end = tier.end if tier is not None else None
        first_local = cq.min_index
        if end is None or end < first_local:
            if end is not None:
                self._note_hole(cq, end, first_local)
            return first_local
        return end

    def _note_hole(self, cq: ConsumeQueue, end: int, first_local: int) -> None:
        progress = self._progress.get((cq.topic, cq.queue_id))
        if progress is None or (end, first_local) not in progress.restarted_at:
            log.warning(
                "tier of %s/%d ends at %d but the oldest local message is %d: the messages "
                "in between were deleted while tiering was off; the tier goes on from %d",
                cq.topic,
                cq.queue_id,
                end,
                first_local,
                first_local,
            )
            if progress is not None:
                progress.restarted_at.append((end, first_local))

    async def upload_once(self, *, force: bool = False) -> int:
        """One pass over every queue: upload each batch that is due (every pending
        message with ``force``). Returns the segments written or adopted; raises
        :class:`BackendError` after the first failed write (the pass stops there, the
        next one retries)."""
        now = time.monotonic()
        due: list[tuple[ConsumeQueue, int, Batch]] = []
        for cq in list(self.store.queues):
            begin = self.begin_of(cq)
            if begin >= cq.max_index:
                self._progress.pop((cq.topic, cq.queue_id), None)
                continue
            key = (cq.topic, cq.queue_id)
            progress = self._progress.get(key)
            if progress is None or progress.begin != begin:
                progress = self._progress[key] = QueueProgress(begin, now)
            sizes = self._pending_sizes(cq, begin)
            batch = plan_batch(
                sizes,
                batch_bytes=self.batch_bytes,
                pending_for_s=float("inf") if force else now - progress.since,
                interval_s=self.interval_s,
            )
            if batch is not None:
                due.append((cq, begin, batch))
        if not due:
            return 0
        results = await asyncio.gather(*(self._upload(cq, b, batch) for cq, b, batch in due))
        return sum(results)

    def _pending_sizes(self, cq: ConsumeQueue, begin: int) -> list[int]:
        """Record sizes from ``begin``, just enough to fill one batch."""
        sizes: list[int] = []
        total = 0
        offset = begin
        while offset < cq.max_index and total <= self.batch_bytes:
            entries = cq.entries(offset, min(ENTRIES_PER_READ, cq.max_index - offset))
            if not entries:
                break
            for entry in entries:
                sizes.append(entry.size if entry.size != BLANK_ENTRY_SIZE else 0)
                total += sizes[-1]
                if total > self.batch_bytes:
                    break
            offset += len(entries)
        return sizes

    async def _upload(self, cq: ConsumeQueue, begin: int, batch: Batch) -> int:
        """Upload one segment of ``cq`` from ``begin``; 1 when the tier has it after."""
        entries = _entries(cq, begin, batch.count)
        if len(entries) != batch.count:
            return 0  # the queue changed under us (truncated): the next pass sees it
        clog = self.store.commitlog
        topic, qid = cq.topic, cq.queue_id
        name = self.catalog.name_for(topic, qid, begin)

        def write() -> tuple[SegmentHeader, int, bool]:
            records = [clog.read(e.physical_offset, e.size) for e in entries]
            header, data = encode_segment(topic, qid, records, self.writer)
            try:
                self.backend.put_new(name, data)
            except ObjectExists:
                found = self.catalog.read_header(name)
                sizes = [o.size for o in self.backend.list(name) if o.name == name]
                return found, sizes[0] if sizes else 0, True
            return header, len(data), False

        async with self._limit:
            started = time.monotonic()
            try:
                header, size, adopted = await asyncio.to_thread(write)
            except BackendError as exc:
                self.counters.errors += 1
                self.counters.last_error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                self.counters.seconds += time.monotonic() - started
        if (header.topic, header.queue_id, header.start) != (topic, qid, begin):
            raise BackendError(f"{name} holds {header.topic}/{header.queue_id}@{header.start}")
        self.catalog.record(header, size)
        if adopted:
            self.counters.adopted += 1
            log.info(
                "tier already had %s [%d, %d) (written by %s): adopted",
                f"{topic}/{qid}",
                header.start,
                header.end,
                header.writer or "unknown",
            )
        else:
            self.counters.segments += 1
            self.counters.messages += header.count
            self.counters.bytes += size
        return 1

    def pending(self) -> dict[tuple[str, int], int]:
        """Messages each queue still has to upload (queues with none left out)."""
        out = {}
        for cq in list(self.store.queues):
            begin = self.begin_of(cq)
            if begin < cq.max_index:
                out[(cq.topic, cq.queue_id)] = cq.max_index - begin
        return out


def _entries(cq: ConsumeQueue, begin: int, count: int) -> list[CqEntry]:
    """``count`` entries from ``begin`` (a read stops at a consume-queue file's end)."""
    out: list[CqEntry] = []
    while len(out) < count:
        got = cq.entries(begin + len(out), count - len(out))
        if not got:
            break
        out += got
    return out
