"""Controller admin API (FastAPI on 8080): health, metrics, the cluster as this member
sees it, broker groups, the event history, switchover, the catalogue (topics, consumer
groups, broker groups' endpoints and write flags) and Raft leadership transfer.

Reads answer from this member's applied state; writes only on the leader (others answer
421 naming it). Refusals carry a message a person can act on as their ``detail``."""

from __future__ import annotations

import time
from typing import Annotated, Any, TypeVar

from fastapi import Body, FastAPI, HTTPException, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from rocketcluster.api.body_limit import BodyLimit
from rocketcluster.api.catalogue import MAX_BATCH_ENTRIES, canonical_spec
from rocketcluster.api.features import advertised
from rocketcluster.api.names import GroupName, TopicName
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.controller.core import ControllerCore, Reply
from rocketcluster.controller.groups_watch import MAX_WAIT_S, version_of
from rocketcluster.controller.state import ControllerCode, validation_problems

M = TypeVar("M", bound=BaseModel)


class ElectRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    broker_id: int | None = Field(default=None, alias="brokerId")


class WritableRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    writable: StrictBool


class TransferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: int | None = Field(default=None, description="member id; null: most caught-up follower")


class _Metrics(Collector):
    def __init__(self, core: ControllerCore) -> None:
        self._core = core

    def collect(self) -> Any:
        core = self._core
        st = core.node.status()
        labels = ["cluster", "node_type", "node_id"]
        values = [core.config.cluster, "controller", str(core.config.node_id)]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        yield gauge("rocketmq_controller_raft_term", "Current Raft term", st["term"])
        yield gauge(
            "rocketmq_controller_is_leader",
            "1 on the Raft leader",
            1.0 if core.node.is_leader else 0.0,
        )
        yield gauge(
            "rocketmq_controller_has_leader",
            "1 while this member knows a Raft leader (itself or another), else 0",
            0.0 if st["leader"] is None else 1.0,
        )
        yield counter(
            "rocketmq_controller_raft_leader_changes_total",
            "Times the Raft leader this member knows changed (to another member or to none)",
            st["leaderChanges"],
        )
        yield counter(
            "rocketmq_controller_raft_elections_total",
            "Raft elections this member started as a candidate (pre-votes not counted)",
            st["electionsStarted"],
        )
        yield gauge("rocketmq_controller_commit_index", "Raft commit index", st["commit"])
        yield gauge("rocketmq_controller_applied_index", "Applied index", st["applied"])
        yield gauge("rocketmq_controller_wal_bytes", "Bytes of Raft log on disk", st["walBytes"])
        yield gauge(
            "rocketmq_controller_elections", "Master elections run by this member", core.elections
        )
        yield gauge(
            "rocketmq_controller_unclean_elections",
            "Unclean elections run by this member",
            core.unclean_elections,
        )
        groups = GaugeMetricFamily(
            "rocketmq_controller_master_epoch",
            "Master epoch per broker group",
            labels=[*labels, "group"],
        )
        sss = GaugeMetricFamily(
            "rocketmq_controller_sync_state_set_size",
            "In-sync replicas per group",
            labels=[*labels, "group"],
        )
        for name, g in core.state.groups.items():
            groups.add_metric([*values, name], g.master_epoch)
            sss.add_metric([*values, name], len(g.sync_state_set))
        yield groups
        yield sss


def _not_leader(core: ControllerCore) -> HTTPException:
    return HTTPException(
        421,
        detail={
            "error": "not the leader",
            "leader": core.leader_address(),
            "leaderAdmin": core.leader_admin_address(),
        },
    )


def _require_leader(core: ControllerCore) -> None:
    """Followers never judge a write, whatever its body: they send it to the leader."""
    if not core.node.is_leader:
        raise _not_leader(core)


def _status(code: str) -> int:
    """The HTTP status of a refused request, by its controller code."""
    if code in (
        ControllerCode.CONTROLLER_NOT_FOUND,
        ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
    ):
        return 404
    if code == ControllerCode.CONTROLLER_INVALID_REQUEST:
        return 400
    if code == ControllerCode.CONTROLLER_TRANSFER_TIMEOUT:
        return 504
    return 409


def _answer(core: ControllerCore, reply: Reply) -> dict[str, Any]:
    """A reply as HTTP: 421 when leadership moved under the request (the command may
    still commit; every write here is safe to repeat), the message as a refusal's detail."""
    if reply.code == ControllerCode.CONTROLLER_NOT_LEADER:
        raise _not_leader(core)
    if not reply.ok:
        raise HTTPException(_status(reply.code), detail=reply.message)
    return {"code": str(reply.code), "message": reply.message, **(reply.data or {})}


def _body(model: type[M], body: Any, what: str) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        detail = f"invalid {what}: {validation_problems(exc, model)}"
        raise HTTPException(422, detail=detail) from None


class CatalogueEntries(BaseModel):
    """``POST /v1/catalogue/entries``: topics and consumer groups to put at once."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    topics: list[TopicSpec] = Field(default_factory=list)
    consumer_groups: list[ConsumerGroupSpec] = Field(default_factory=list, alias="consumerGroups")

    @model_validator(mode="after")
    def _bounded(self) -> CatalogueEntries:
        if len(self.topics) + len(self.consumer_groups) > MAX_BATCH_ENTRIES:
            raise ValueError(f"at most {MAX_BATCH_ENTRIES} entries in one batch")
        return self


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` naming the schema of a body validated by hand (so that its
    refusals read well), with pydantic's ``$defs`` inlined for OpenAPI."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = str(node.get("$ref", ""))
        if ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**inline(defs[ref.removeprefix("#/$defs/")]), **rest}
        return {k: inline(v) for k, v in node.items()}

    return {"requestBody": {"content": {"application/json": {"schema": inline(schema)}}}}


def _spec(model: type[BaseModel], kind: str, name: str, body: Any) -> dict[str, Any]:
    """The body as canonical spec JSON; its ``name`` may be left out, but must not
    differ from the path's."""
    if not isinstance(body, dict):
        raise HTTPException(422, detail=f"invalid {kind}: the body must be a JSON object")
    given = body.get("name", name)
    if given != name:
        raise HTTPException(
            400,
            detail=f"the path names {kind} {name!r} but the body names {given!r}: make them "
            "agree (to rename, put the new name and delete the old one)",
        )
    spec = _body(model, {**body, "name": name}, kind)
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)  # canonical_spec


def create_controller_app(core: ControllerCore) -> FastAPI:
    app = FastAPI(title="rocketcluster controller admin", version="v1")
    app.add_middleware(BodyLimit)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Metrics(core))

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> Response:
        if core.node.leader_id is not None:
            return JSONResponse({"status": "ready", "leader": core.node.leader_id})
        return JSONResponse({"status": "not ready", "reason": "no leader known"}, status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    @app.get("/v1/cluster")
    def cluster() -> dict[str, Any]:
        return {
            "cluster": core.config.cluster,
            "self": core.config.node_id,
            "members": [m.model_dump(by_alias=True) for m in core.config.members],
            "leader": core.node.leader_id,
            "leaderAddress": core.leader_address(),
            "raft": core.node.status(),
            "brokers": core.liveness.view(),
            # What this member's code understands (api/features.py): the operator
            # writes what only newer code reads once every member reports it.
            **advertised(),
        }

    @app.get("/v1/groups")
    def groups() -> list[dict[str, Any]]:
        return core.group_views()

    @app.get("/v1/watch/groups")
    async def watch_groups(
        known: str = Query("", description="the version the caller holds"),
        wait: float = Query(0.0, ge=0.0, le=MAX_WAIT_S, description="seconds to hold"),
    ) -> dict[str, Any]:
        """The groups' views and their version, once they differ from ``known`` (at
        once when they already do), or after ``wait`` seconds. Only the leader answers
        (421 otherwise, also when it stops leading while the request waits): a deposed
        member's views would stop changing."""
        _require_leader(core)
        await core.groups_watch.wait_while(
            lambda: core.node.is_leader and version_of(core.group_views()) == known, wait
        )
        _require_leader(core)
        views = core.group_views()
        return {"version": version_of(views), "groups": views}

    @app.get("/v1/groups/{name}")
    def group(name: str) -> dict[str, Any]:
        g = core.state.groups.get(name)
        if g is None:
            raise HTTPException(404, detail=f"no broker group {name!r}")
        return g.view()

    @app.post("/v1/groups/{name}/elect")
    async def elect(name: str, body: ElectRequest) -> dict[str, Any]:
        if not core.node.is_leader:
            raise _not_leader(core)
        designated = body.broker_id is not None
        reply = await core.elect_master(name, body.broker_id, designated, "admin request")
        if reply.code not in (ControllerCode.SUCCESS, ControllerCode.CONTROLLER_MASTER_STILL_EXIST):
            raise HTTPException(409, detail={"code": str(reply.code), "message": reply.message})
        return {"code": str(reply.code), "message": reply.message, "group": reply.data}

    @app.get("/v1/events")
    def events(
        since: float = Query(0.0, description="seconds since the epoch"),
        group: str | None = Query(None),
    ) -> list[dict[str, Any]]:
        return core.state.events_since(int(since * 1000), group)

    @app.get("/v1/routes")
    def routes() -> dict[str, Any]:
        return core.state.routes

    @app.get("/v1/catalogue")
    def catalogue() -> dict[str, Any]:
        """The ``Catalogue`` contract (version, topics, consumerGroups, groups) as this
        member applied it: any member answers, a follower perhaps a little behind; ask
        the leader to read your own writes."""
        return core.state.catalogue()

    @app.post("/v1/catalogue/entries", openapi_extra=_documented(CatalogueEntries))
    async def put_entries(body: Annotated[Any, Body()]) -> dict[str, Any]:
        """Create or replace up to 1,000 topics and consumer groups in one command
        (body: ``{"topics": [TopicSpec], "consumerGroups": [ConsumerGroupSpec]}``): a
        manifest of thousands in a few round trips. All or none: one invalid spec
        refuses the batch. The answer's ``entries`` counts those that changed."""
        _require_leader(core)
        batch = _body(CatalogueEntries, body, "catalogue entries")
        return _answer(
            core,
            await core.put_entries(
                [canonical_spec(t) for t in batch.topics],
                [canonical_spec(g) for g in batch.consumer_groups],
            ),
        )

    @app.put("/v1/topics/{name}", openapi_extra=_documented(TopicSpec))
    async def put_topic(name: str, body: Annotated[Any, Body()]) -> dict[str, Any]:
        """Create or replace a topic (body: TopicSpec JSON); an unchanged put changes
        nothing, not even the catalogue version."""
        _require_leader(core)
        return _answer(core, await core.put_topic(_spec(TopicSpec, "topic", name, body)))

    @app.delete("/v1/topics/{name}")
    async def delete_topic(name: TopicName) -> dict[str, Any]:
        _require_leader(core)
        return _answer(core, await core.delete_topic(name))

    @app.put("/v1/consumer-groups/{name}", openapi_extra=_documented(ConsumerGroupSpec))
    async def put_consumer_group(name: str, body: Annotated[Any, Body()]) -> dict[str, Any]:
        """Create or replace a consumer group (body: ConsumerGroupSpec JSON)."""
        _require_leader(core)
        spec = _spec(ConsumerGroupSpec, "consumer group", name, body)
        return _answer(core, await core.put_consumer_group(spec))

    @app.delete("/v1/consumer-groups/{name}")
    async def delete_consumer_group(name: GroupName) -> dict[str, Any]:
        _require_leader(core)
        return _answer(core, await core.delete_consumer_group(name))

    @app.put("/v1/groups/{name}/writable", openapi_extra=_documented(WritableRequest))
    async def set_writable(name: str, body: Annotated[Any, Body()]) -> dict[str, Any]:
        """``{"writable": false}`` before a group is drained: routes offer it read-only."""
        _require_leader(core)
        request = _body(WritableRequest, body, "request")
        return _answer(core, await core.set_group_writable(name, request.writable))

    @app.delete("/v1/groups/{name}")
    async def forget_group(name: str) -> dict[str, Any]:
        """Forget a removed broker group (replica info and catalogue entry); 409 while
        any of its brokers is alive."""
        _require_leader(core)
        return _answer(core, await core.forget_group(name))

    @app.post("/v1/raft/transfer-leadership", openapi_extra=_documented(TransferRequest))
    async def transfer_leadership(body: Annotated[Any, Body()] = None) -> dict[str, Any]:
        """Hand leadership to ``{"to": member}`` (null or no body: the most caught-up
        follower); answers once it moved, 409/504 when it did not."""
        _require_leader(core)
        request = _body(TransferRequest, {} if body is None else body, "request")
        answer = _answer(core, await core.transfer_leadership(request.to))
        answer["leaderAdmin"] = core.config.member(answer["leader"]).admin_address
        return answer

    @app.get("/v1/raft/log")
    def raft_log(limit: int = Query(50, ge=1, le=10_000)) -> list[dict[str, int]]:
        storage = core.node.storage
        first, last = storage.first_index(), storage.last_index()
        lo = max(first, last - limit + 1)
        if last < lo:
            return []
        return [
            {"index": e.index, "term": e.term, "bytes": len(e.data)}
            for e in storage.entries(lo, last + 1)
        ]

    @app.get("/v1/time")
    def now() -> dict[str, float]:
        return {"time": time.time()}

    return app
