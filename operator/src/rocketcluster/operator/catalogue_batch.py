"""The puts of many RocketTopic / RocketConsumerGroup handlers, gathered into catalogue
batches.

Why: each object's handler puts one entry, and one put is one Raft entry with its own
fsync and a new catalogue version that every broker then fetches. When kopf resumes
10,000 objects at start-up, or a user applies them at once, that was 10,000 commands in
a row (~43 a second: four minutes). Handlers running together now hand their entries
to one sender per cluster, which waits ``linger_s`` for the others and sends up to
MAX_BATCH_ENTRIES in one ``PutCatalogueEntries`` command; each handler gets the
version that holds its entry, as from its own put.

A batch is all or none on the controllers: when one entry is refused (4xx), or the
controllers predate the batch (404/405), the batch's entries are put one at a time so
that every handler hears its own answer. Any other failure (no leader, unreachable) is
every waiting handler's error, and kopf retries each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.catalogue import MAX_BATCH_ENTRIES
from rocketcluster.operator.admin import AdminError, ControllerAdmin

TOPICS = "topics"
GROUPS = "consumer-groups"
ClusterKey = tuple[str, str]  # namespace, RocketCluster name


@dataclass
class _Waiting:
    """One entry's newest body, and every handler waiting for it to be put."""

    collection: str
    body: dict[str, Any]
    futures: list[asyncio.Future[int]]


@dataclass
class _Queue:
    admin: ControllerAdmin  # the newest caller's view of the controllers
    entries: dict[tuple[str, str], _Waiting] = field(default_factory=dict)
    sender: asyncio.Task[None] | None = None


@dataclass
class PutBatcher:
    linger_s: float = 0.05
    _queues: dict[ClusterKey, _Queue] = field(default_factory=dict, init=False)

    async def put(
        self, cluster: ClusterKey, admin: ControllerAdmin, collection: str, body: dict[str, Any]
    ) -> int:
        """Put ``body`` into ``collection`` of the cluster's catalogue, with whatever
        other handlers put at the same time: the catalogue version that holds it."""
        if collection not in (TOPICS, GROUPS):
            raise ValueError(f"unknown catalogue collection {collection!r}")
        queue = self._queues.setdefault(cluster, _Queue(admin))
        queue.admin = admin
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiting = queue.entries.get((collection, body["name"]))
        if waiting is None:
            queue.entries[(collection, body["name"])] = _Waiting(collection, body, [future])
        else:  # the same entry again before it was sent: the newer body goes
            waiting.body = body
            waiting.futures.append(future)
        if queue.sender is None:
            queue.sender = asyncio.create_task(self._send_all(cluster, queue))
        return await future

    async def _send_all(self, cluster: ClusterKey, queue: _Queue) -> None:
        try:
            while queue.entries:
                await asyncio.sleep(self.linger_s)  # the handlers started with this one
                names = list(queue.entries)[:MAX_BATCH_ENTRIES]
                batch = [queue.entries.pop(name) for name in names]
                await _send(queue.admin, batch)
        finally:
            queue.sender = None
            for waiting in queue.entries.values():  # only when cancelled (shutdown)
                for future in waiting.futures:
                    future.cancel()
            if self._queues.get(cluster) is queue:
                del self._queues[cluster]


async def _send(admin: ControllerAdmin, batch: list[_Waiting]) -> None:
    try:
        version = await admin.put_entries(
            [w.body for w in batch if w.collection == TOPICS],
            [w.body for w in batch if w.collection == GROUPS],
        )
    except AdminError as exc:
        if not exc.refused:  # unavailable: every waiter's error (one bad entry or old
            # controllers refuse the batch: then each entry on its own, below)
            for waiting in batch:
                _settle(waiting, error=exc)
            return
        for waiting in batch:  # each on its own: each handler hears its own answer
            try:
                one = await admin.put(waiting.collection, waiting.body["name"], waiting.body)
            except Exception as one_exc:
                _settle(waiting, error=one_exc)
            else:
                _settle(waiting, version=one)
        return
    except Exception as exc:  # nothing may leave a handler waiting forever
        for waiting in batch:
            _settle(waiting, error=exc)
        return
    for waiting in batch:
        _settle(waiting, version=version)


def _settle(waiting: _Waiting, *, version: int = 0, error: Exception | None = None) -> None:
    for future in waiting.futures:
        if future.done():  # its handler was cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(version)
