"""Dispatch: turn appended records into consume-queue entries and index entries.

Records are dispatched in commit-log order and only up to the dispatch limit (the
confirm offset: what consumers may see). ``ConsumeQueueTable`` owns every consume
queue of the store.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rocketcluster.api.names import path_component_problem, topic_name_problem
from rocketcluster.broker.store.commitlog import AppendedRecord
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.errors import InvalidNameError
from rocketcluster.broker.store.index import IndexRequest, IndexService
from rocketcluster.broker.store.record import DispatchRequest, MessageToStore

log = logging.getLogger(__name__)


class ConsumeQueueTable:
    """All consume queues, under ``<root>/<topic>/<queue id>/``."""

    def __init__(self, root: Path, entries_per_file: int) -> None:
        self.root = root
        self.entries_per_file = entries_per_file
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> list[tuple[Path, str]]:
        """Open every queue; returns (path, reason) for what must be quarantined."""
        rejected: list[tuple[Path, str]] = []
        if not self.root.exists():
            return rejected
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir() or topic_name_problem(topic_dir.name):
                rejected.append((topic_dir, "not a topic directory"))
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.is_dir() or not queue_dir.name.isdigit():
                    rejected.append((queue_dir, "not a queue directory"))
                    continue
                cq = ConsumeQueue(
                    queue_dir, topic_dir.name, int(queue_dir.name), self.entries_per_file
                )
                rejected.extend((p, "consume queue file out of sequence") for p in cq.load())
                self._queues[(cq.topic, cq.queue_id)] = cq
        return rejected

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            # The last line of defence where a topic becomes a directory: every entry
            # validates names, so this never triggers unless one of them was bypassed.
            problem = path_component_problem(topic)
            if problem:
                raise InvalidNameError("topic", topic, f"not a safe directory name: {problem}")
            cq = ConsumeQueue(
                self.root / topic / str(queue_id), topic, queue_id, self.entries_per_file
            )
            self._queues[(topic, queue_id)] = cq
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def queues_of(self, topic: str) -> list[ConsumeQueue]:
        return [cq for (t, _), cq in self._queues.items() if t == topic]

    def clear(self) -> None:
        self._queues.clear()

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self._queues if k[0] == topic]:
            self._queues.pop(key).destroy()

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()


class Dispatcher:
    """Holds appended-but-not-dispatched records and dispatches them in order.

    Pending work is kept per appended batch (the messages and where they landed), so
    the write path creates no per-record objects for dispatch.
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
        # Called with every dispatched batch of records (the send path's recent ids).
        self.record_listeners: list[Callable[[list[DispatchRequest]], None]] = []
        self._pending: collections.deque[PendingBatch] = collections.deque()
        self._pending_records = 0
        # Every record ending at or below this offset is dispatched.
        self.dispatched_offset = start
        self.stalled: BaseException | None = None

    def add_batch(self, msgs: Sequence[MessageToStore], records: list[AppendedRecord]) -> None:
        self._pending.append(PendingBatch(msgs, records, 0))
        self._pending_records += len(records)

    def add(self, request: DispatchRequest) -> None:
        """Queue one record known only by its dispatch request (replication)."""
        self.add_requests([request])

    def add_requests(self, requests: list[DispatchRequest]) -> None:
        self._pending.append(PendingBatch(None, requests, 0))
        self._pending_records += len(requests)

    @property
    def pending(self) -> int:
        return self._pending_records

    def pending_requests(self) -> list[DispatchRequest]:
        out: list[DispatchRequest] = []
        for batch in self._pending:
            out.extend(batch.requests(batch.done, len(batch.records)))
        return out

    def drop_from(self, physical_offset: int) -> None:
        """Forget pending records at or after ``physical_offset`` (a truncated tail)."""
        kept: collections.deque[PendingBatch] = collections.deque()
        count = 0
        for batch in self._pending:
            records = batch.records
            stop = batch.done
            while stop < len(records) and records[stop].physical_offset < physical_offset:
                stop += 1
            if stop > batch.done:
                msgs = None if batch.msgs is None else batch.msgs[:stop]
                kept.append(PendingBatch(msgs, records[:stop], batch.done))
                count += stop - batch.done
        self._pending = kept
        self._pending_records = count
        self.dispatched_offset = min(self.dispatched_offset, physical_offset)

    def dispatch_until(self, limit: int) -> int:
        """Dispatch pending records that end at or below ``limit``; returns how many.

        If writing fails (a full disk under a new consume-queue file), the records stay
        pending and are retried: consume-queue puts are idempotent. Index entries go to
        the index's own writer thread, which retries by itself.
        """
        requests: list[DispatchRequest] = []
        taken: list[tuple[PendingBatch, int]] = []
        for batch in self._pending:
            records = batch.records
            start = batch.done
            stop = start
            while (
                stop < len(records) and records[stop].physical_offset + records[stop].size <= limit
            ):
                stop += 1
            if stop > start:
                requests.extend(batch.requests(start, stop))
                taken.append((batch, stop))
            if stop < len(records):
                break
        if not requests:
            return 0
        try:
            self.apply(requests)
        except Exception as exc:
            if self.stalled is None:
                log.error("dispatch stalled at %d: %s", requests[0].physical_offset, exc)
            self.stalled = exc
            return 0
        self.stalled = None
        for batch, stop in taken:
            batch.done = stop
        while self._pending and self._pending[0].done == len(self._pending[0].records):
            self._pending.popleft()
        self._pending_records -= len(requests)
        last = requests[-1]
        self.dispatched_offset = last.physical_offset + last.size
        return len(requests)

    def apply(self, batch: list[DispatchRequest]) -> None:
        queues = self._queues
        current_key: tuple[str, int] | None = None
        cq: ConsumeQueue | None = None
        index_requests: list[IndexRequest] = []
        for req in batch:
            key = (req.topic, req.queue_id)
            if key != current_key or cq is None:
                cq = queues.get_or_create(req.topic, req.queue_id)
                current_key = key
            cq.put(req.queue_offset, req.physical_offset, req.size, req.tags_code)
            if req.msg_id or req.keys:
                index_requests.append(
                    IndexRequest(req.topic, req.physical_offset, req.size, req.msg_id, req.keys)
                )
        last = batch[-1]
        self._index.submit(index_requests, last.physical_offset + last.size)
        for listener in self.record_listeners:
            listener(batch)
        if self._on_dispatched is not None:
            self._on_dispatched({req.topic for req in batch})


class PendingBatch:
    """Records of one append waiting for dispatch; ``done`` of them already are."""

    __slots__ = ("done", "msgs", "records")

    def __init__(
        self,
        msgs: Sequence[MessageToStore] | None,
        records: Sequence[AppendedRecord] | Sequence[DispatchRequest],
        done: int,
    ) -> None:
        self.msgs = msgs
        self.records = records
        self.done = done

    def requests(self, start: int, stop: int) -> list[DispatchRequest]:
        if self.msgs is None:
            return list(self.records[start:stop])  # type: ignore[arg-type]
        msgs = self.msgs
        out = []
        for k in range(start, stop):
            msg = msgs[k]
            phys, qoff, size = self.records[k]  # type: ignore[misc]
            out.append(
                DispatchRequest(
                    msg.topic, msg.queue_id, qoff, phys, size, msg.tags_code, msg.msg_id, msg.keys
                )
            )
        return out
