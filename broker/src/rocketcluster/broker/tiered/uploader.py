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

What costs CPU per message (reading the records, encoding, the backend call) runs in
the broker's worker process (worker.py); the plans and the catalogue stay on the
event loop.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import functools
import itertools
import logging
import struct
import time
from dataclasses import dataclass, field

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.consumequeue import (
    CQ_UNIT,
    CQ_UNIT_SIZE,
    ConsumeQueue,
)
from rocketcluster.broker.tiered.backend import BackendError, TierBackend
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.policy import plan_batch
from rocketcluster.broker.tiered.worker import SegmentJob, UploadJob, Written, run_upload

log = logging.getLogger(__name__)

ENTRIES_PER_READ = 4096
# The records of due segments read together at most (a backlog of many queues is
# uploaded a group at a time).
READ_BUDGET = 64 << 20


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
    """Where a queue's next segment starts, since when data waits there, and the
    records from there on scanned so far (commit-log offsets and sizes, parallel
    lists) — each consume-queue entry is read once however many passes it waits, and
    in bulk: per-record Python on the event loop is what the uploader costs the
    producers (DESIGN §9)."""

    begin: int
    since: float
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    total: int = 0

    def moved_to(self, begin: int, now: float) -> None:
        """The tier now ends at ``begin``: forget what was uploaded."""
        gone = begin - self.begin
        if 0 <= gone <= len(self.sizes):
            self.total -= sum(self.sizes[:gone])
            del self.sizes[:gone]
            del self.offsets[:gone]
        else:  # truncated, or another writer's segment: scan again
            self.offsets.clear()
            self.sizes.clear()
            self.total = 0
        self.begin, self.since = begin, now

    def scan(self, cq: ConsumeQueue, batch_bytes: int) -> None:
        """Extend the lists with new entries until a batch is full (or the queue
        ends): the entry that crosses ``batch_bytes`` is the last one taken."""
        index = self.begin + len(self.sizes)
        while index < cq.max_index and self.total <= batch_bytes:
            raw = cq.raw_entries(index, min(ENTRIES_PER_READ, cq.max_index - index))
            count = len(raw) // CQ_UNIT_SIZE
            if not count:
                break
            flat = _cq_entries(count).unpack(raw)  # one C call for every entry
            sizes = list(flat[1::3])
            before = list(itertools.accumulate(sizes, initial=self.total))
            take = bisect.bisect_right(before, batch_bytes, 0, count)
            self.offsets += flat[0 : 3 * take : 3]
            self.sizes += sizes[:take]
            self.total = before[take]
            index += take
            if take < count:
                break


@functools.lru_cache(maxsize=64)
def _cq_entries(count: int) -> struct.Struct:
    """``count`` consume-queue entries in one struct (a pure memo of formats)."""
    return struct.Struct(">" + CQ_UNIT.format.lstrip(">") * count)


@dataclass(frozen=True)
class Due:
    """One segment to upload: a queue, where it starts, its records' positions."""

    cq: ConsumeQueue
    begin: int
    offsets: list[int]
    sizes: list[int]

    @property
    def bytes(self) -> int:
        return sum(self.sizes)


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
        spec_json: str = "",
        concurrency: int = 2,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.backend = backend
        self.batch_bytes = batch_bytes
        self.interval_s = interval_s
        self.writer = writer
        self.counters = UploadCounters()
        self._progress: dict[tuple[str, int], QueueProgress] = {}
        self._holes: set[tuple[str, int, int]] = set()  # (topic, queue, tier end) logged
        # Where segments are written: a process of their own in a broker (worker.py),
        # None for a thread of this one (tests, tools).
        self.pool: concurrent.futures.Executor | None = None
        self.spec_json = spec_json
        self._limit = asyncio.Semaphore(concurrency)

    def begin_of(self, cq: ConsumeQueue) -> int:
        """The first queue offset of ``cq`` the tier does not hold (the oldest local
        message when the tier ends before it: see :meth:`_note_hole`)."""
        tier = self.catalog.get(cq.topic, cq.queue_id)
        end = tier.end if tier is not None else None
        return cq.min_index if end is None or end < cq.min_index else end

    def _note_hole(self, cq: ConsumeQueue) -> None:
        """Say once per hole that a queue's tier had to start again past its end."""
        tier = self.catalog.get(cq.topic, cq.queue_id)
        end = tier.end if tier is not None else None
        if end is None or end >= cq.min_index or (cq.topic, cq.queue_id, end) in self._holes:
            return
        self._holes.add((cq.topic, cq.queue_id, end))
        log.warning(
            "tier of %s/%d ends at %d but the oldest local message is %d: the messages "
            "in between were deleted while tiering was off; the tier goes on from %d",
            cq.topic,
            cq.queue_id,
            end,
            cq.min_index,
            cq.min_index,
        )

    async def upload_once(self, *, force: bool = False) -> int:
        """One pass over every queue: upload each batch that is due (every pending
        message with ``force``). Returns the segments written or adopted; raises
        :class:`BackendError` after the first failed write (the pass stops there, the
        next one retries)."""
        now = time.monotonic()
        due: list[Due] = []
        for cq in list(self.store.queues):
            begin = self.begin_of(cq)
            key = (cq.topic, cq.queue_id)
            if begin >= cq.max_index:
                self._progress.pop(key, None)
                continue
            progress = self._progress.get(key)
            if progress is None:
                self._note_hole(cq)
                progress = self._progress[key] = QueueProgress(begin, now)
            elif progress.begin != begin:
                self._note_hole(cq)
                progress.moved_to(begin, now)
            progress.scan(cq, self.batch_bytes)
            waited = float("inf") if force else now - progress.since
            if progress.total < self.batch_bytes and waited < self.interval_s:
                continue  # neither full nor old enough: nothing to plan yet
            batch = plan_batch(
                progress.sizes,
                batch_bytes=self.batch_bytes,
                pending_for_s=waited,
                interval_s=self.interval_s,
            )
            if batch is not None:
                n = batch.count
                due.append(Due(cq, begin, progress.offsets[:n], progress.sizes[:n]))
        results = await asyncio.gather(*(self._write(chunk) for chunk in _chunks(due, READ_BUDGET)))
        return sum(results)

    async def _write(self, chunk: list[Due]) -> int:
        """Upload one group of segments (in the worker process when there is one);
        returns how many the tier has after (ours, or adopted)."""
        clog = self.store.commitlog
        start = min(d.offsets[0] for d in chunk)
        end = max(d.offsets[-1] + d.sizes[-1] for d in chunk)
        job = UploadJob(
            self.spec_json,
            tuple(
                (seg.base, str(seg.path))
                for seg in clog.segments
                if seg.end > start and seg.base < end
            ),
            self.writer,
            tuple(
                SegmentJob.of(
                    self.catalog.name_for(d.cq.topic, d.cq.queue_id, d.begin),
                    d.cq.topic,
                    d.cq.queue_id,
                    d.begin,
                    d.offsets,
                    d.sizes,
                )
                for d in chunk
            ),
        )
        async with self._limit:
            started = time.monotonic()
            try:
                if self.pool is not None:
                    loop = asyncio.get_running_loop()
                    written = await loop.run_in_executor(self.pool, run_upload, job)
                else:
                    written = await asyncio.to_thread(run_upload, job, self.backend)
            except BackendError as exc:
                self.counters.errors += 1
                self.counters.last_error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                self.counters.seconds += time.monotonic() - started
        for due, done in zip(chunk, written, strict=True):
            self._record(due, done)
        await asyncio.to_thread(self.catalog.save_pending)
        return len(written)

    def _record(self, due: Due, done: Written) -> None:
        header, topic, qid = done.header, due.cq.topic, due.cq.queue_id
        if (header.topic, header.queue_id, header.start) != (topic, qid, due.begin):
            raise BackendError(
                f"the tier's segment of {topic}/{qid}@{due.begin} holds "
                f"{header.topic}/{header.queue_id}@{header.start}"
            )
        self.catalog.record(header, done.size)  # saved once per group (save_pending)
        if done.adopted:
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
            self.counters.bytes += done.size

    def pending(self) -> dict[tuple[str, int], int]:
        """Messages each queue still has to upload (queues with none left out)."""
        out = {}
        for cq in list(self.store.queues):
            begin = self.begin_of(cq)
            if begin < cq.max_index:
                out[(cq.topic, cq.queue_id)] = cq.max_index - begin
        return out


def _chunks(due: list[Due], budget: int) -> list[list[Due]]:
    """Due segments in groups of at most ``budget`` bytes (each group's records are
    read together; one segment larger than the budget is a group of its own)."""
    chunks: list[list[Due]] = []
    used = budget
    for item in due:
        size = item.bytes
        if used + size > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(item)
        used += size
    return chunks
