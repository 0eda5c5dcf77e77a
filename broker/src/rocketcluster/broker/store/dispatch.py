"""Dispatch: turn appended records into consume-queue entries and index entries.

Records are dispatched in commit-log order and only up to the dispatch limit (the
confirm offset: what consumers may see). ``ConsumeQueueTable`` owns every consume
queue of the store.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rocketcluster.api.names import topic_name_problem
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.index import IndexRequest, IndexService

log = logging.getLogger(__name__)


class DispatchRequest(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    msg_id: str
    keys: tuple[str, ...]


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

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self._queues if k[0] == topic]:
            self._queues.pop(key).destroy()

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()


class Dispatcher:
    """Holds appended-but-not-dispatched records and dispatches them in order."""

    def __init__(self, queues: ConsumeQueueTable, index: IndexService, start: int) -> None:
        self._queues = queues
        self._index = index
        self._pending: collections.deque[DispatchRequest] = collections.deque()
        # Every record ending at or below this offset is dispatched.
        self.dispatched_offset = start
        self.stalled: BaseException | None = None

    def add(self, request: DispatchRequest) -> None:
        self._pending.append(request)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def drop_pending_from(self, physical_offset: int) -> None:
        while self._pending and self._pending[-1].physical_offset >= physical_offset:
            self._pending.pop()

    def dispatch_until(self, limit: int) -> int:
        """Dispatch pending records that end at or below ``limit``; returns how many.

        If writing fails (a full disk under the index), the batch stays pending and is
        retried: consume-queue puts and index adds are both idempotent.
        """
        pending = self._pending
        if not pending or pending[0].physical_offset + pending[0].size > limit:
            return 0
        batch: list[DispatchRequest] = []
        while pending and pending[0].physical_offset + pending[0].size <= limit:
            batch.append(pending.popleft())
        try:
            self.apply(batch)
        except Exception as exc:
            pending.extendleft(reversed(batch))
            if self.stalled is None:
                log.error("dispatch stalled at %d: %s", batch[0].physical_offset, exc)
            self.stalled = exc
            return 0
        self.stalled = None
        last = batch[-1]
        self.dispatched_offset = last.physical_offset + last.size
        return len(batch)

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
        if index_requests:
            self._index.add(index_requests)
