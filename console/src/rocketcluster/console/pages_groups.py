"""Consumer groups: the list with each group's live Burrow-style status and lag, and
one group's page — lag in messages and in time per queue with the status and its
reason, in-flight, retrying and DLQ counts, connected clients — with two actions:
reset the offsets (earliest, latest, a time) and resend from the DLQ (one, selected,
all). Each action shows what it will do and asks again before doing it; both are
written to the audit log."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from rocketcluster.api.stats import LagStatus
from rocketcluster.console.access import Viewer
from rocketcluster.console.cluster import ClusterSnapshot, read_cluster
from rocketcluster.console.lag_status import SEVERITY, Verdict
from rocketcluster.console.live_stats import LiveStats
from rocketcluster.console.pages_topics import _ms
from rocketcluster.console.upstream import Upstream, UpstreamError
from rocketcluster.console.web import Refused, check_post, console_of, flash, render, viewer

router = APIRouter()
MAX_RESEND_IDS = 1000


def _q(name: str) -> str:
    return quote(name, safe="")


async def _group_names(
    upstream: Upstream, cluster: ClusterSnapshot
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    readers = cluster.readers()
    results = await upstream.gather(
        [upstream.listing(r.broker.admin, "/v1/groups") for r in readers]
    )
    groups: dict[str, dict[str, Any]] = {}
    errors = []
    for r, result in zip(readers, results, strict=True):
        if isinstance(result, UpstreamError):
            errors.append(f"groups of {r.broker.group}: {result.reason}")
            continue
        for g in result:
            groups.setdefault(g["name"], g)
    return groups, errors


@router.get("/groups", response_class=HTMLResponse)
async def groups_page(request: Request, q: str = "") -> HTMLResponse:
    who = viewer(request)
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config)
    groups, errors = await _group_names(console.upstream, cluster)
    live = await console.stats.get(console.upstream, cluster)
    readers = cluster.readers()
    consumption = await console.upstream.gather(
        [console.upstream.listing(r.broker.admin, "/v1/consumption") for r in readers]
    )
    inflight: dict[str, int] = {}
    lag: dict[str, int] = {}
    for r, rows in zip(readers, consumption, strict=True):
        if isinstance(rows, UpstreamError):
            errors.append(f"consumption on {r.broker.group}: {rows.reason}")
            continue
        for row in rows:
            inflight[row["group"]] = inflight.get(row["group"], 0) + int(row.get("inflight", 0))
            lag[row["group"]] = lag.get(row["group"], 0) + int(row.get("lag", 0))
    verdicts = live.verdicts()
    needle = q.strip().lower()
    rows = []
    for name in sorted(groups):
        if not who.may_see_group(name) or (needle and needle not in name.lower()):
            continue
        mine = [v for k, v in verdicts.items() if k[1] == name]
        status = max((v.status for v in mine), key=SEVERITY.__getitem__, default=None)
        worst = max(mine, key=lambda v: (SEVERITY[v.status], v.lag_ms), default=None)
        rows.append(
            {
                "name": name,
                "spec": groups[name],
                "status": status.value if status else "—",
                "reason": worst.reason if worst else "no stats snapshot yet",
                "lag": lag.get(name, 0),
                "lag_ms": max((v.lag_ms for v in mine), default=0),
                "inflight": inflight.get(name, 0),
                "rate": live.consume_rate(name),
            }
        )
    return render(
        request,
        "groups.html",
        title="Consumer groups",
        nav="groups",
        rows=rows,
        q=q,
        errors=errors + live.errors,
    )


@dataclass
class GroupView:
    name: str
    spec: dict[str, Any]
    clients: list[dict[str, Any]]
    retrying: int
    dlq: int
    queues: list[dict[str, Any]]
    topics: list[str]


async def _group_view(
    upstream: Upstream,
    cluster: ClusterSnapshot,
    name: str,
    verdicts: dict[Any, Verdict],
    now_ms: int,
) -> tuple[GroupView | None, list[str]]:
    readers = cluster.readers()
    results = await upstream.gather(
        [upstream.get(r.broker.admin, f"/v1/groups/{_q(name)}/status") for r in readers]
    )
    errors = []
    view: GroupView | None = None
    for r, status in zip(readers, results, strict=True):
        if isinstance(status, UpstreamError):
            if status.status != 404:
                errors.append(f"{r.broker.group}: {status.reason}")
            continue
        if view is None:
            view = GroupView(name, status.get("spec", {}), [], 0, 0, [], [])
        view.clients += [{**c, "brokerGroup": r.broker.group} for c in status.get("clients", [])]
        view.retrying += int(status.get("retrying", 0))
        view.dlq += int(status.get("dlq", 0))
        for row in status.get("queues", []):
            verdict = verdicts.get((r.broker.group, name, row["topic"], row["queueId"]))
            oldest = row.get("oldestUnackedTimestamp")
            view.queues.append(
                {
                    **row,
                    "brokerGroup": r.broker.group,
                    "lagMs": max(0, now_ms - int(oldest)) if oldest else 0,
                    "status": verdict.status.value if verdict else "—",
                    "reason": verdict.reason if verdict else "no stats snapshot of this queue yet",
                }
            )
    if view is not None:
        view.topics = sorted({q["topic"] for q in view.queues})
    return view, errors


@dataclass
class Loaded:
    """What a group's page or action reads: the cluster, the live stats, the group."""

    cluster: ClusterSnapshot
    live: LiveStats
    view: GroupView | None
    errors: list[str]


async def _load(request: Request, name: str) -> Loaded:
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config)
    live = await console.stats.get(console.upstream, cluster)
    view, errors = await _group_view(
        console.upstream, cluster, name, live.verdicts(name), live.now_ms
    )
    return Loaded(cluster, live, view, errors)


async def _operable(
    request: Request, name: str, who: Viewer, doing: str
) -> tuple[Loaded, GroupView]:
    """The group an action is about, once ``who`` may act on it (Refused otherwise)."""
    if not who.may_see_group(name):
        raise Refused(f"you have no permission on consumer group {name!r}")
    loaded = await _load(request, name)
    view = loaded.view
    if view is None:
        raise Refused(f"no broker group knows a consumer group named {name!r}")
    if not who.may_operate_group(name, view.topics):
        raise Refused(f"{doing} {name!r} needs sub permission on the group and its topics")
    return loaded, view


async def _dlq(
    upstream: Upstream, cluster: ClusterSnapshot, name: str, start: int
) -> tuple[list[dict[str, Any]], list[str]]:
    readers = cluster.readers()
    results = await upstream.gather(
        [
            upstream.get(
                r.broker.admin, f"/v1/groups/{_q(name)}/dlq", **{"from": start, "limit": 50}
            )
            for r in readers
        ]
    )
    out, errors = [], []
    for r, page in zip(readers, results, strict=True):
        if isinstance(page, UpstreamError):
            errors.append(f"DLQ on {r.broker.group}: {page.reason}")
            continue
        out += [{**m, "brokerGroup": r.broker.group} for m in page.get("messages", [])]
    return out, errors


@router.get("/groups/{name}", response_class=HTMLResponse)
async def group_page(request: Request, name: str, dlq_from: int = 0) -> HTMLResponse:
    who = viewer(request)
    if not who.may_see_group(name):
        raise Refused(f"you have no permission on consumer group {name!r}")
    console = console_of(request)
    loaded = await _load(request, name)
    cluster, live, view, errors = loaded.cluster, loaded.live, loaded.view, loaded.errors
    if view is None:
        return render(
            request,
            "refused.html",
            404,
            title="Unknown consumer group",
            message=f"no broker group knows a consumer group named {name!r}",
            errors=errors,
        )
    dead, dlq_errors = await _dlq(console.upstream, cluster, name, max(0, dlq_from))
    status = max(
        (q["status"] for q in view.queues if q["status"] != "—"),
        key=lambda s: SEVERITY[LagStatus(s)],
        default="—",
    )
    return render(
        request,
        "group.html",
        title=f"Consumer group {name}",
        nav="groups",
        group=view,
        status=status,
        dead=dead,
        errors=errors + dlq_errors + live.errors,
        can_operate=who.may_operate_group(name, view.topics),
        rate=live.consume_rate(name),
    )


@dataclass
class ResetStep:
    broker_group: str
    admin: str
    topic: str
    queue_id: int
    current: int
    target: int
    min_offset: int
    max_offset: int


async def _plan_reset(
    upstream: Upstream,
    cluster: ClusterSnapshot,
    view: GroupView,
    topic: str,
    to: str,
    at_ms: int | None,
) -> tuple[list[ResetStep], list[str]]:
    steps: list[ResetStep] = []
    errors: list[str] = []
    for row in view.queues:
        if topic and row["topic"] != topic:
            continue
        master = cluster.master(row["brokerGroup"])
        if master is None:
            errors.append(f"{row['brokerGroup']} has no master: its queues cannot be reset now")
            continue
        lo, hi = int(row["minOffset"]), int(row["maxOffset"])
        if to == "earliest":
            target = lo
        elif to == "latest":
            target = hi
        else:
            try:
                found = await upstream.get(
                    master.broker.admin,
                    f"/v1/topics/{_q(row['topic'])}/queues/{row['queueId']}/offset",
                    time=at_ms,
                )
            except UpstreamError as exc:
                errors.append(f"{row['topic']} queue {row['queueId']}: {exc.reason}")
                continue
            target = int(found["offset"])
            lo, hi = int(found["minOffset"]), int(found["maxOffset"])
        steps.append(
            ResetStep(
                row["brokerGroup"],
                master.broker.admin,
                row["topic"],
                int(row["queueId"]),
                int(row["committedOffset"]),
                target,
                lo,
                hi,
            )
        )
    return steps, errors


@router.post("/groups/{name}/reset", response_class=HTMLResponse)
async def reset(request: Request, name: str) -> Response:
    form = await request.form()
    who = check_post(request, form)
    console = console_of(request)
    loaded, view = await _operable(request, name, who, "resetting")
    cluster, errors = loaded.cluster, loaded.errors
    to = str(form.get("to") or "")
    topic = str(form.get("topic") or "")
    back = RedirectResponse(f"/groups/{_q(name)}", status_code=303)
    if to not in ("earliest", "latest", "time"):
        flash(request, back, "choose earliest, latest or a time to reset to", "error")
        return back
    at_ms = None
    if to == "time":
        try:
            at_ms = _ms(str(form.get("time") or ""))
        except ValueError as exc:
            flash(request, back, str(exc), "error")
            return back
        if at_ms is None:
            flash(request, back, "give the time to reset to", "error")
            return back
    if topic and topic not in view.topics:
        flash(request, back, f"{name} consumes no topic {topic!r}", "error")
        return back
    steps, plan_errors = await _plan_reset(console.upstream, cluster, view, topic, to, at_ms)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime((at_ms or 0) / 1000))
    target = {"earliest": "the earliest offset", "latest": "the latest offset"}.get(
        to, f"the first message stored at or after {when}"
    )
    if form.get("confirm") != "yes":
        return render(
            request,
            "confirm_reset.html",
            title=f"Reset {name}?",
            nav="groups",
            group=name,
            steps=steps,
            errors=errors + plan_errors,
            to=to,
            topic=topic,
            time_value=str(form.get("time") or ""),
            target=target,
            consumers=len(view.clients),
        )
    done, failed = 0, []
    for s in steps:
        try:
            await console.upstream.request(
                "PUT",
                s.admin,
                f"/v1/groups/{_q(name)}/offsets",
                json={"topic": s.topic, "queueId": s.queue_id, "offset": s.target},
            )
            done += 1
        except UpstreamError as exc:
            failed.append(f"{s.topic}:{s.queue_id} on {s.broker_group}: {exc.reason}")
    console.audit.record(
        who.name,
        "reset-offsets",
        name,
        "done" if not failed else f"{len(failed)} failed",
        to=to,
        topic=topic or "*",
        time=at_ms,
        queues=[
            {
                "brokerGroup": s.broker_group,
                "topic": s.topic,
                "queueId": s.queue_id,
                "from": s.current,
                "to": s.target,
            }
            for s in steps
        ],
        failures=failed,
    )
    if failed:
        flash(
            request,
            back,
            f"reset {done} queues; {len(failed)} failed: " + "; ".join(failed),
            "error",
        )
    else:
        flash(request, back, f"reset {done} queues of {name} to {target}")
    return back


@router.post("/groups/{name}/dlq/resend", response_class=HTMLResponse)
async def resend(request: Request, name: str) -> Response:
    form = await request.form()
    who = check_post(request, form)
    console = console_of(request)
    loaded, view = await _operable(request, name, who, "resending the dead letters of")
    cluster = loaded.cluster
    back = RedirectResponse(f"/groups/{_q(name)}", status_code=303)
    everything = form.get("all") == "yes"
    picked = [str(v) for v in form.getlist("id")][:MAX_RESEND_IDS]
    if not everything and not picked:
        flash(request, back, "select the dead letters to resend, or resend all", "error")
        return back
    # "group|id": the broker group that holds the DLQ copy.
    by_group: dict[str, list[str]] = {}
    for item in picked:
        group, _, mid = item.partition("|")
        by_group.setdefault(group, []).append(mid)
    if form.get("confirm") != "yes":
        return render(
            request,
            "confirm_resend.html",
            title=f"Resend dead letters of {name}?",
            nav="groups",
            group=name,
            everything=everything,
            picked=picked,
            by_group=by_group,
            dlq=view.dlq,
            topics=view.topics,
        )
    resent, missing, failed = [], [], []
    targets = cluster.broker_groups() if everything else list(by_group)
    for bg in targets:
        master = cluster.master(bg)
        if master is None:
            failed.append(f"{bg} has no master")
            continue
        payload: dict[str, Any] = {"all": True} if everything else {"messageIds": by_group[bg]}
        try:
            answer = await console.upstream.post_json(
                master.broker.admin, f"/v1/groups/{_q(name)}/dlq/resend", payload
            )
        except UpstreamError as exc:
            failed.append(f"{bg}: {exc.reason}")
            continue
        resent += answer.get("resent", [])
        missing += answer.get("notFound", [])
    console.audit.record(
        who.name,
        "resend-dlq",
        name,
        "done" if not failed else "partly failed",
        all=everything,
        resent=[r.get("messageId") for r in resent],
        notFound=missing,
        failures=failed,
    )
    text = (
        f"resent {len(resent)} dead letters of {name} to their topics (only {name} receives them)"
    )
    if missing:
        text += f"; {len(missing)} not found in the DLQ"
    if failed:
        text += "; failed: " + "; ".join(failed)
    flash(request, back, text, "error" if failed else "ok")
    return back
