"""Admin REST API of a broker (FastAPI on port 8080): health, metrics, topics, consumer
groups, offsets, message lookup and store statistics. OpenAPI at /openapi.json."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from rocketcluster.api.body_limit import BodyLimit
from rocketcluster.api.features import advertised
from rocketcluster.api.names import GroupName, MessageId, MessageKey, TopicName
from rocketcluster.api.stats import ROW_KINDS
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.admin.browse_routes import browse_router
from rocketcluster.broker.admin.consumption import consumed_keys, consumption_rows
from rocketcluster.broker.admin.dlq_routes import dlq_router
from rocketcluster.broker.admin.group_routes import group_router
from rocketcluster.broker.admin.paging import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    next_link,
    page_of,
    parse_queue_cursor,
    parse_row_cursor,
    queue_page,
    row_cursor,
)
from rocketcluster.broker.admin.send_routes import send_router
from rocketcluster.broker.admin.trace_routes import trace_router
from rocketcluster.broker.admin.views import (
    message_view,
    require_group,
    require_queue,
    require_topic,
)
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.messaging.catalogue_sync import CatalogueService
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.stats.reader import MAX_PAGE_MESSAGES, offset_for_time, read_page

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items per page")]


class OffsetReset(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    topic: TopicName
    queue_id: int = Field(alias="queueId", ge=0)
    offset: int = Field(ge=0)


def _http(exc: MessagingError) -> HTTPException:
    not_found = {Code.TOPIC_NOT_FOUND, Code.CONSUMER_GROUP_NOT_FOUND, Code.NOT_FOUND}
    return HTTPException(404 if exc.code in not_found else 400, detail=exc.message)


def create_admin_app(
    rt: MessagingRuntime,
    ready: Callable[[], bool],
    catalogue: CatalogueService | None = None,
    client_port_problem: Callable[[bool], str | None] = lambda _: None,
) -> FastAPI:
    """``client_port_problem(for_liveness)``: why the client port is not served (its
    front processes), for /readyz at once, for /healthz once it has lasted (a crash
    loop the broker cannot end itself: the kubelet restarts the pod)."""
    app = FastAPI(
        title="rocketcluster broker admin",
        version="v1",
        description=(
            "Topics, consumer groups, offsets, message lookup and statistics of one broker."
        ),
    )
    app.add_middleware(BodyLimit)
    store = rt.store

    @app.get("/healthz")
    def healthz() -> Response:
        problem = client_port_problem(True)
        if problem:
            return JSONResponse({"status": "unhealthy", "reason": problem}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if ready() and not store.closed and store.failure is None:
            return JSONResponse({"status": "ready"})
        reason = "store failed" if store.failure else client_port_problem(False) or "starting"
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(rt.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/broker")
    def broker() -> dict[str, Any]:
        """Who this broker is (the operator reads ``role`` and ``brokerId``), and what
        it serves: the catalogue version applied and whether its group takes sends."""
        cfg = rt.config
        routes = rt.routes
        return {
            "cluster": cfg.cluster,
            "group": cfg.group,
            "brokerId": rt.role.broker_id if rt.role else cfg.broker_id,
            "role": rt.role.role if rt.role else "master",
            "writable": routes.writable,
            "catalogueVersion": routes.version,
            "catalogue": catalogue.status() if catalogue else None,
            "replication": rt.role.status() if rt.role else None,
            "clientEndpoint": cfg.client_endpoint,
            "routeEndpoint": cfg.route_endpoint,
            "commitLog": {
                "minOffset": store.commitlog.min_offset,
                "maxOffset": store.commitlog.write_offset,
                "flushedOffset": store.commitlog.flushed_offset,
                "dispatchedOffset": store.dispatched_offset,
            },
            # What this broker's code understands (api/features.py), for the operator.
            **advertised(),
        }

    # -- topics --------------------------------------------------------------

    def _cursor(parse: Callable[[str], Any], after: str | None) -> Any:
        try:
            return None if after is None else parse(after)
        except ValueError as exc:
            raise HTTPException(422, detail=str(exc)) from exc

    # The endpoints below touch the broker's state (registry, POP states, the store):
    # async, so they run on the event loop that owns it. A plain ``def`` would run on
    # a worker thread, beside the loop changing the same dicts (and the POP journal
    # needs the loop: PUT .../offsets answered 500 from a thread).

    @app.get("/v1/topics")
    async def list_topics(
        after: Annotated[TopicName | None, Query()] = None, limit: Limit = DEFAULT_LIMIT
    ) -> JSONResponse:
        """The topics in name order, a page at a time (the next page's link in the
        ``Link`` header)."""
        page = page_of(rt.registry.topics(), lambda t: t.name, after, limit, str)
        return JSONResponse(
            [t.model_dump(by_alias=True) for t in page.items],
            headers=next_link("/v1/topics", page, limit),
        )

    @app.get("/v1/queues")
    async def list_queues(after: str | None = None, limit: Limit = DEFAULT_LIMIT) -> JSONResponse:
        """Every queue of every topic with its offsets, in (topic, queue id) order, a
        page at a time; ``after`` is the last row's ``topic:queueId``."""
        start = _cursor(parse_queue_cursor, after)
        topics = [(t.name, t.queues) for t in rt.registry.topics()]
        page = queue_page(topics, start, limit)
        rows = []
        for topic, qid in page.items:
            lo, hi = store.queue_offsets(topic, qid)
            rows.append({"topic": topic, "queueId": qid, "minOffset": lo, "maxOffset": hi})
        return JSONResponse(rows, headers=next_link("/v1/queues", page, limit))

    @app.post("/v1/topics", status_code=201)
    async def create_topic(spec: TopicSpec) -> dict[str, Any]:
        try:
            return rt.registry.put_topic(spec).model_dump(by_alias=True)
        except MessagingError as exc:
            raise _http(exc) from exc

    @app.get("/v1/topics/{name}")
    async def get_topic(name: TopicName) -> dict[str, Any]:
        topic = require_topic(rt, name)
        queues = []
        for qid in range(topic.queues):
            lo, hi = store.queue_offsets(name, qid)
            queues.append({"queueId": qid, "minOffset": lo, "maxOffset": hi})
        return {**topic.model_dump(by_alias=True), "queueOffsets": queues}

    @app.delete("/v1/topics/{name}", status_code=204)
    async def delete_topic(name: TopicName) -> Response:
        if not rt.registry.delete_topic(name):
            raise HTTPException(404, detail=f"topic {name!r} does not exist")
        return Response(status_code=204)

    # -- consumer groups -------------------------------------------------------

    @app.get("/v1/groups")
    async def list_groups(
        after: Annotated[GroupName | None, Query()] = None, limit: Limit = DEFAULT_LIMIT
    ) -> JSONResponse:
        """The consumer groups in name order, a page at a time."""
        page = page_of(rt.registry.groups(), lambda g: g.name, after, limit, str)
        return JSONResponse(
            [g.model_dump(by_alias=True) for g in page.items],
            headers=next_link("/v1/groups", page, limit),
        )

    @app.post("/v1/groups", status_code=201)
    async def create_group(spec: ConsumerGroupSpec) -> dict[str, Any]:
        return rt.registry.put_group(spec).model_dump(by_alias=True)

    @app.get("/v1/groups/{name}")
    async def get_group(name: GroupName) -> dict[str, Any]:
        return require_group(rt, name).model_dump(by_alias=True)

    @app.delete("/v1/groups/{name}", status_code=204)
    async def delete_group(name: GroupName) -> Response:
        if not rt.registry.delete_group(name):
            raise HTTPException(404, detail=f"consumer group {name!r} does not exist")
        rt.pop.forget_group(name)
        return Response(status_code=204)

    @app.get("/v1/groups/{name}/offsets")
    async def group_offsets(name: GroupName) -> list[dict[str, Any]]:
        """Where the group stands on each queue it consumed here (see /v1/consumption
        for the fields)."""
        require_group(rt, name)
        return consumption_rows(rt, consumed_keys(rt, name))

    @app.get("/v1/consumption")
    async def consumption(after: str | None = None, limit: Limit = DEFAULT_LIMIT) -> JSONResponse:
        """Every group's place on every queue it consumed here, in (group, topic, queue
        id) order, a page at a time; ``after`` is the last row's
        ``group:topic:queueId``. ``lag`` counts the messages not acknowledged yet:
        ``inflight`` (delivered, invisible now) plus ``ready`` (a receive would get
        them now)."""
        start = _cursor(parse_row_cursor, after)
        page = page_of(consumed_keys(rt), lambda k: k, start, limit, row_cursor)
        return JSONResponse(
            consumption_rows(rt, page.items), headers=next_link("/v1/consumption", page, limit)
        )

    @app.put("/v1/groups/{name}/offsets")
    async def reset_offset(name: GroupName, body: OffsetReset) -> dict[str, Any]:
        try:
            rt.registry.require_group(name)
            rt.pop.reset_offset(name, body.topic, body.queue_id, body.offset)
        except MessagingError as exc:
            raise _http(exc) from exc
        return {"group": name, "topic": body.topic, "queueId": body.queue_id, "offset": body.offset}

    # -- messages --------------------------------------------------------------

    @app.get("/v1/messages/{message_id}")
    async def message_by_id(message_id: MessageId) -> list[dict[str, Any]]:
        """Messages with this id — in the local store, or in the tier once local
        retention removed them."""
        found = await queries.lookup_by_id(store, rt.tier, message_id)
        if not found:
            raise HTTPException(404, detail=f"no message with id {message_id!r}")
        return [message_view(m) for m in found]

    @app.get("/v1/messages")
    async def messages_by_key(
        topic: Annotated[TopicName, Query()],
        key: Annotated[MessageKey, Query()],
        limit: int = Query(32, ge=1, le=1000),
    ) -> list[dict[str, Any]]:
        found = await queries.lookup_by_key(store, rt.tier, topic, key, limit)
        return [message_view(m) for m in found]

    @app.get("/v1/topics/{name}/queues/{queue_id}/offset")
    async def queue_offset_for_time(
        name: TopicName, queue_id: int, time_ms: int = Query(..., alias="time", ge=0)
    ) -> dict[str, Any]:
        """The first offset of a queue stored at or after ``time`` (epoch ms), the tier
        included: where a consumer group resets to for "from this time on"."""
        require_queue(rt, name, queue_id)
        offset = await queries.offset_for_time(store, rt.tier, name, queue_id, time_ms)
        lo, hi = store.queue_offsets(name, queue_id)
        return {"offset": offset, "minOffset": lo, "maxOffset": hi}

    @app.get("/v1/tier")
    async def tier_status() -> dict[str, Any]:
        """Tiered storage on this broker: backend, upload lag, what the tier holds per
        queue, reads served from it ({"enabled": false} when it is off)."""
        if rt.tier is None:
            return {"enabled": False}
        return rt.tier.status()

    @app.post("/v1/tier/flush")
    async def tier_flush() -> dict[str, Any]:
        """Upload everything pending now (the master only; tools and tests)."""
        if rt.tier is None:
            raise HTTPException(409, detail="tiered storage is not enabled on this broker")
        try:
            uploaded = await rt.tier.flush()
        except Exception as exc:
            raise HTTPException(503, detail=f"the tier's backend failed: {exc}") from exc
        return {"segments": uploaded, "uploading": rt.is_master()}

    # -- statistics --------------------------------------------------------------

    @app.get("/v1/stats")
    def stats() -> dict[str, Any]:
        clog = store.commitlog
        report = store.recovery
        return {
            "time": time.time(),
            "commitLog": {
                "minOffset": clog.min_offset,
                "maxOffset": clog.write_offset,
                "flushedOffset": clog.flushed_offset,
                "segments": len(clog.segments),
                "bytesOnDisk": clog.size_bytes(),
            },
            "dispatchedOffset": store.dispatched_offset,
            "consumeQueues": len(store.queues),
            "diskUsedRatio": store.disk_used_ratio,
            "timers": {"pending": rt.timers.pending(), "delivered": rt.timers.delivered},
            "transactions": rt.transactions.counts(),
            "clients": len(rt.clients.sessions()),
            "statsSnapshots": rt.stats.status(),
            "recovery": {
                "seconds": report.seconds,
                "cleanShutdown": report.clean_shutdown,
                "stopReason": report.stop_reason,
                "recordsRedispatched": report.records_redispatched,
                "quarantined": [q.reason for q in report.quarantined],
                "warnings": report.warnings,
            },
        }

    @app.post("/v1/store/retention")
    async def run_retention() -> dict[str, Any]:
        """Apply the retention policy now (it also runs every retentionInterval): what
        it deleted, why, and how many segments it kept because the tier does not have
        their messages yet."""
        decision = await store.run_retention()
        return {
            "deletedSegments": decision.delete_count,
            "reasons": [str(r) for r in decision.reasons],
            "heldByTier": decision.held_by_tier,
            "commitLogMinOffset": store.commitlog.min_offset,
        }

    @app.get("/v1/stats/snapshots")
    async def stats_snapshots(
        from_offset: int = Query(0, alias="fromOffset", ge=0),
        limit: int = Query(100, ge=1, le=MAX_PAGE_MESSAGES),
        rows: str = Query(
            ",".join(ROW_KINDS),
            max_length=64,
            description="which rows of each snapshot, comma-separated (default all): the "
            "console reads queues and consumers only, the tiering job segments too",
        ),
    ) -> dict[str, Any]:
        """A page of the stats snapshots this group published (queue offsets of the
        stats topic); continue from ``nextOffset``. Runs on the broker's loop: the
        store is read where it is written."""
        wanted = frozenset(r.strip() for r in rows.split(",") if r.strip())
        unknown = sorted(wanted - set(ROW_KINDS))
        if unknown:
            raise HTTPException(
                422, detail=f"rows: {', '.join(unknown)} unknown (known: {', '.join(ROW_KINDS)})"
            )
        return read_page(store, from_offset, limit, rows=wanted).to_json()

    @app.get("/v1/stats/offset")
    async def stats_offset(time_ms: int = Query(..., alias="time", ge=0)) -> dict[str, Any]:
        """The first stats-topic offset stored at or after ``time`` (epoch ms)."""
        offset, lo, hi = offset_for_time(store, time_ms)
        return {"offset": offset, "minOffset": lo, "maxOffset": hi}

    app.include_router(trace_router(rt))
    app.include_router(browse_router(rt))
    app.include_router(send_router(rt))
    app.include_router(dlq_router(rt))
    app.include_router(group_router(rt))
    return app
