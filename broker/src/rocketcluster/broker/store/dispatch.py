"""Dispatch: turn appended records into consume-queue entries and index entries.

Records are dispatched in commit-log order and only up to the dispatch limit (the
confirm offset: what consumers may see). ``ConsumeQueueTable``
(``consumequeue``) owns every consume queue of the store.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence

from rocketcluster.broker.store.commitlog import AppendedRecord
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable
from rocketcluster.broker.store.dispatch_batch import DispatchBatch, IndexColumns, LandedRun
from rocketcluster.broker.store.index import IndexService
from rocketcluster.broker.store.record import DispatchRequest, MessageToStore

log = logging.getLogger(__name__)


class Dispatcher:
    """Holds appended-but-not-dispatched records and dispatches them in order.

    Pending work is kept per appended batch (or replicated frame) as a
    ``DispatchBatch``: columns and one run of packed consume-queue entries per queue,
    so dispatch costs a join and a write per queue per batch, not a call per record.
    """

    def __init__(
        self,
        queues: ConsumeQueueTable,
        index: IndexService,
        start: int,
        on_dispatched: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._queues = queues
        self._index = index
        self._on_dispatched = on_dispatched
        # Called with the runs of every dispatched batch (the send path's recent ids).
        self.record_listeners: list[Callable[[list[LandedRun]], None]] = []
        self._pending: collections.deque[DispatchBatch] = collections.deque()
        self._pending_records = 0
        # Every record ending at or below this offset is dispatched.
        self.dispatched_offset = start
        self.stalled: BaseException | None = None

    def add_batch(self, msgs: Sequence[MessageToStore], records: list[AppendedRecord]) -> None:
        self.add_scanned(DispatchBatch.of_appended(msgs, records))

    def add_scanned(self, batch: DispatchBatch) -> None:
        """Queue the records of a batch built by the record scan (replication)."""
        if len(batch):
            self._pending.append(batch)
            self._pending_records += len(batch)

    @property
    def pending(self) -> int:
        return self._pending_records

    def pending_requests(self) -> list[DispatchRequest]:
        out: list[DispatchRequest] = []
        for batch in self._pending:
            out.extend(batch.requests(batch.done, len(batch)))
        return out

    def drop_from(self, physical_offset: int) -> None:
        """Forget pending records at or after ``physical_offset`` (a truncated tail)."""
        kept: collections.deque[DispatchBatch] = collections.deque()
        count = 0
        for batch in self._pending:
            keep = batch.cut(physical_offset)
            if keep > batch.done:
                kept.append(batch)
                count += keep - batch.done
        self._pending = kept
        self._pending_records = count
        self.dispatched_offset = min(self.dispatched_offset, physical_offset)

    def dispatch_until(self, limit: int) -> int:
        """Dispatch pending records that end at or below ``limit``; returns how many.

        If writing fails (a full disk under a new consume-queue file), the records stay
        pending and are retried: consume-queue puts are idempotent. Index entries go to
        the index's own writer thread, which retries by itself.
        """
        taken: list[tuple[DispatchBatch, int, list[int]]] = []
        for batch in self._pending:
            stop = batch.stop_at(limit)
            if stop > batch.done:
                taken.append((batch, stop, batch.run_counts(stop)))
            if stop < len(batch):
                break
        if not taken:
            return 0
        try:
            self.apply(taken)
        except Exception as exc:
            if self.stalled is None:
                first = taken[0][0]
                log.error("dispatch stalled at %d: %s", first.phys[first.done], exc)
            self.stalled = exc
            return 0
        self.stalled = None
        count = 0
        for batch, stop, counts in taken:
            count += stop - batch.done
            batch.done = stop
            for run, done in zip(batch.runs, counts, strict=True):
                run.done = done
        while self._pending and self._pending[0].done == len(self._pending[0]):
            self._pending.popleft()
        self._pending_records -= count
        last_batch, last_stop, _ = taken[-1]
        self.dispatched_offset = last_batch.ends[last_stop - 1]
        return count

    def apply(self, taken: list[tuple[DispatchBatch, int, list[int]]]) -> None:
        """Write records ``[batch.done, stop)`` of each batch: each run's new entries
        with one consume-queue write, the index columns to the index writer."""
        queues = self._queues
        landed: list[LandedRun] = []
        topics: set[str] = set()
        columns: list[IndexColumns] = []
        for batch, stop, counts in taken:
            for run, count in zip(batch.runs, counts, strict=True):
                done = run.done
                if count > done:
                    cq = queues.get_or_create(run.topic, run.queue_id)
                    units = run.units if done == 0 and count == len(run.units) else None
                    cq.put_units(run.first_offset + done, units or run.units[done:count])
                    ids = run.ids if units is not None else run.ids[done:count]
                    landed.append(LandedRun(run.topic, run.queue_id, run.first_offset + done, ids))
                    topics.add(run.topic)
            columns.append(batch.index_columns(batch.done, stop))
        last_batch, last_stop, _ = taken[-1]
        self._index.submit(columns, last_batch.ends[last_stop - 1])
        for listener in self.record_listeners:
            listener(landed)
        if self._on_dispatched is not None:
            self._on_dispatched(topics)
