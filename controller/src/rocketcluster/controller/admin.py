"""Controller admin API (FastAPI on 8080): health, metrics, the cluster as this member
sees it, broker groups, the event history, and switchover."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

from rocketcluster.controller.core import ControllerCore
from rocketcluster.controller.state import ControllerCode


class ElectRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    broker_id: int | None = Field(default=None, alias="brokerId")


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

        yield gauge("rocketmq_controller_raft_term", "Current Raft term", st["term"])
        yield gauge(
            "rocketmq_controller_is_leader",
            "1 on the Raft leader",
            1.0 if core.node.is_leader else 0.0,
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


def create_controller_app(core: ControllerCore) -> FastAPI:
    app = FastAPI(title="rocketcluster controller admin", version="v1")
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
        }

    @app.get("/v1/groups")
    def groups() -> list[dict[str, Any]]:
        return [g.view() for _, g in sorted(core.state.groups.items())]

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
