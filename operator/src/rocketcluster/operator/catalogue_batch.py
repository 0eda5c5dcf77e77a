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

Batches go only to controllers that every one report ``catalogue-batch`` (the feature
gate, orchestrate/compat.py): a leader on new code would accept the command and its
followers on the previous release fail it, each keeping a different catalogue.
Until then the entries are put one at a time, as the previous release takes them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.catalogue import MAX_BATCH_ENTRIES
from rocketcluster.operator.admin import AdminError, ControllerAdmin
from rocketcluster.operator.orchestrate.compat import Gate, understood

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
    batch: bool = True  # the newest caller's gate: every controller takes a batch
    entries: dict[tuple[str, str], _Waiting] = field(default_factory=dict)
    sender: asyncio.Task[None] | None = None


@dataclass
class PutBatcher:
    linger_s: float = 0.05
    _queues: dict[ClusterKey, _Queue] = field(default_factory=dict, init=False)

    async def put(
        self,
        cluster: ClusterKey,
        admin: ControllerAdmin,
        collection: str,
        body: dict[str, Any],
        *,
        batch: bool = True,
    ) -> int:
        """Put ``body`` into ``collection`` of the cluster's catalogue, with whatever
        other handlers put at the same time: the catalogue version that holds it.
        ``batch``: every controller takes PutCatalogueEntries (else one put each)."""
        if collection not in (TOPICS, GROUPS):
            raise ValueError(f"unknown catalogue collection {collection!r}")
        queue = self._queues.setdefault(cluster, _Queue(admin))
        queue.admin = admin
        queue.batch = batch
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
                if queue.batch:
                    await _send(queue.admin, batch)
                else:
                    await _send_each(queue.admin, batch)
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
        await _send_each(admin, batch)  # each handler hears its own answer
        return
    except Exception as exc:  # nothing may leave a handler waiting forever
        for waiting in batch:
            _settle(waiting, error=exc)
        return
    for waiting in batch:
        _settle(waiting, version=version)


async def _send_each(admin: ControllerAdmin, batch: list[_Waiting]) -> None:
    """One put per entry: what every controller takes, the previous release too."""
    for waiting in batch:
        try:
            one = await admin.put(waiting.collection, waiting.body["name"], waiting.body)
        except Exception as one_exc:
            _settle(waiting, error=one_exc)
        else:
            _settle(waiting, version=one)


def _settle(waiting: _Waiting, *, version: int = 0, error: Exception | None = None) -> None:
    for future in waiting.futures:
        if future.done():  # its handler was cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(version)


async def put_missing(
    admin: ControllerAdmin,
    catalogue: dict[str, Any],
    *,
    topics: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    features: Gate | None = None,
) -> None:
    """Put what differs from the catalogue (the manifest's topics and groups, in the
    catalogue's canonical form: ``canonical_spec``), MAX_BATCH_ENTRIES to a command:
    a manifest of 10,000 topics is ten Raft entries, not ten thousand puts each with
    its own fsync. Controllers that predate the batch get one put per entry.

    ``features`` (the gate; None: everything open): batches only once every
    controller reports ``catalogue-batch``; a topic's ``trace`` only once every
    controller and broker reports ``topic-trace``. Both sides of the comparison are
    taken as every member understands them, so a withheld ``trace`` is not put again
    every tick, and is put once the gate opens."""
    gate = features if features is not None else Gate()
    have_topics = {t["name"]: understood(t, gate) for t in catalogue.get("topics") or []}
    have_groups = {g["name"]: g for g in catalogue.get("consumerGroups") or []}
    wanted = [understood(t, gate) for t in topics]
    puts = [("topics", t) for t in wanted if have_topics.get(t["name"]) != t]
    puts += [("consumer-groups", g) for g in groups if have_groups.get(g["name"]) != g]
    if not gate.catalogue_batch:
        for collection, body in puts:  # one put per entry, as every member takes it
            await admin.put(collection, body["name"], body)
        return
    for start in range(0, len(puts), MAX_BATCH_ENTRIES):
        batch = puts[start : start + MAX_BATCH_ENTRIES]
        try:
            await admin.put_entries(
                [body for kind, body in batch if kind == "topics"],
                [body for kind, body in batch if kind == "consumer-groups"],
            )
        except AdminError as exc:
            if exc.status not in (404, 405):
                raise
            for collection, body in puts[start:]:  # one put per entry, as before
                await admin.put(collection, body["name"], body)
            return
