"""A consumer group at a glance: its spec, the clients of it connected here, how many
of its messages are being retried or are dead letters, and where it stands on each
queue with the store time of its oldest unacknowledged message."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter

from rocketcluster.api.names import GroupName, dlq_topic
from rocketcluster.broker.admin.consumption import consumed_keys, consumption_rows
from rocketcluster.broker.admin.views import require_group
from rocketcluster.broker.messaging import dead_letters, queries
from rocketcluster.broker.messaging.clients import ClientSession
from rocketcluster.broker.messaging.runtime import MessagingRuntime


def _client_view(session: ClientSession, now_loop: float, now_ms: int) -> dict[str, Any]:
    view: dict[str, Any] = {
        "clientId": session.client_id,
        "address": session.address or None,
        "language": session.language or None,
        "version": session.version or None,
        # last_seen is the event loop's clock: as epoch milliseconds
        "lastSeen": now_ms - int((now_loop - session.last_seen) * 1000),
    }
    topics = session.subscriptions | session.topics
    if topics:
        view["topics"] = sorted(topics)
    return view


def group_router(rt: MessagingRuntime) -> APIRouter:
    router = APIRouter(tags=["consumer groups"])
    store = rt.store

    async def oldest_unacked(row: dict[str, Any]) -> int | None:
        """The store time of the message at the committed offset, when one is
        unacknowledged; None when the tier holding it cannot be read."""
        if row["committedOffset"] >= row["maxOffset"]:
            return None
        try:
            got = await queries.read_queue(
                store, rt.tier, row["topic"], row["queueId"], row["committedOffset"], 1
            )
        except Exception:  # only the tier raises: the status shows what it can
            return None
        return got.messages[0].store_timestamp if got.messages else None

    @router.get("/v1/groups/{name}/status")
    async def group_status(name: GroupName) -> dict[str, Any]:
        """The group's spec, its clients connected to this broker, ``retrying``: its
        messages delivered more than once and still in flight, or waiting to be
        delivered again; ``dlq``: its dead letters; ``queues``: where it stands on
        each queue (the rows of /v1/consumption) and the store time of the oldest
        message it has not acknowledged."""
        group = require_group(rt, name)
        now_ms = int(time.time() * 1000)
        now_loop = asyncio.get_running_loop().time()
        clients = [
            _client_view(s, now_loop, now_ms)
            for s in sorted(rt.clients.sessions(), key=lambda s: s.client_id)
            if s.group == name
        ]
        retrying = 0
        for (group_name, _, _), state in rt.pop.states().items():
            if group_name != name:
                continue
            retrying += len(state.waiting)
            retrying += sum(
                1 for f in state.inflight.values() if f.attempt > 1 or f.deadline_ms <= now_ms
            )
        dlq = rt.registry.get_topic(dlq_topic(name))
        queues = consumption_rows(rt, consumed_keys(rt, name))
        for row in queues:
            row["oldestUnackedTimestamp"] = await oldest_unacked(row)
        return {
            "group": name,
            "spec": group.model_dump(by_alias=True),
            "clients": clients,
            "retrying": retrying,
            "dlq": dead_letters.dlq_bounds(store, name, dlq.queues if dlq else 0).count,
            "queues": queues,
        }

    return router
