"""Topics: a searchable list, and one topic's page: its queues on every broker group
(offsets, messages, rate, tier), the message browser (by queue and offset range, by
store-time range, by key) and, for administrators, "send a test message"."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from rocketcluster.api.names import SYSTEM_TOPIC_PREFIX
from rocketcluster.console.cluster import ClusterSnapshot, read_cluster
from rocketcluster.console.upstream import Upstream, UpstreamError
from rocketcluster.console.web import Refused, check_post, console_of, flash, render, viewer

router = APIRouter()
PAGE = 100
BROWSE_MAX = 100
TEST_BODY_MAX = 64 * 1024


@dataclass
class TopicRow:
    name: str
    spec: dict[str, Any]
    queues: list[dict[str, Any]] = field(default_factory=list)  # with "brokerGroup"

    @property
    def messages(self) -> int:
        return sum(max(0, q["maxOffset"] - q["minOffset"]) for q in self.queues)

    @property
    def system(self) -> bool:
        return self.name.startswith(SYSTEM_TOPIC_PREFIX) or self.name.startswith("%")


async def read_topics(
    upstream: Upstream, cluster: ClusterSnapshot
) -> tuple[dict[str, TopicRow], list[str]]:
    """Every topic with its queues on each broker group (read from each group's
    master, else a replica)."""
    topics: dict[str, TopicRow] = {}
    errors: list[str] = []
    readers = cluster.readers()
    calls = [upstream.listing(r.broker.admin, "/v1/topics") for r in readers]
    calls += [upstream.listing(r.broker.admin, "/v1/queues") for r in readers]
    results = await upstream.gather(calls)
    for reader, specs in zip(readers, results[: len(readers)], strict=True):
        if isinstance(specs, UpstreamError):
            errors.append(f"topics of {reader.broker.group}: {specs.reason}")
            continue
        for spec in specs:
            topics.setdefault(spec["name"], TopicRow(spec["name"], spec))
    for reader, queues in zip(readers, results[len(readers) :], strict=True):
        if isinstance(queues, UpstreamError):
            errors.append(f"queues of {reader.broker.group}: {queues.reason}")
            continue
        for q in queues:
            row = topics.get(q["topic"])
            if row is not None:
                row.queues.append({**q, "brokerGroup": reader.broker.group})
    return topics, errors


async def read_topic(
    upstream: Upstream, cluster: ClusterSnapshot, name: str
) -> tuple[TopicRow | None, list[str]]:
    """One topic with its queues on each broker group (None: no group knows it)."""
    readers = cluster.readers()
    path = f"/v1/topics/{quote(name, safe='')}"
    results = await upstream.gather([upstream.get(r.broker.admin, path) for r in readers])
    row: TopicRow | None = None
    errors: list[str] = []
    for reader, found in zip(readers, results, strict=True):
        if isinstance(found, UpstreamError):
            if found.status != 404:
                errors.append(f"topic {name} on {reader.broker.group}: {found.reason}")
            continue
        queues = found.pop("queueOffsets", [])
        if row is None:
            row = TopicRow(name, found)
        row.queues += [{**q, "topic": name, "brokerGroup": reader.broker.group} for q in queues]
    return row, errors


@router.get("/topics", response_class=HTMLResponse)
async def topics_page(
    request: Request, q: str = "", page: int = 1, system: bool = False
) -> HTMLResponse:
    who = viewer(request)
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config)
    topics, errors = await read_topics(console.upstream, cluster)
    live = await console.stats.get(console.upstream, cluster)
    errors += live.errors + [p.text for p in cluster.problems if "does not answer" in p.text]
    needle = q.strip().lower()
    shown = [
        t
        for name, t in sorted(topics.items())
        if who.may_see_topic(name)
        and (system or not t.system)
        and (not needle or needle in name.lower())
    ]
    pages = max(1, math.ceil(len(shown) / PAGE))
    page = min(max(1, page), pages)
    rows = [
        {"topic": t, "rate": live.produce_rate(t.name)}
        for t in shown[(page - 1) * PAGE : page * PAGE]
    ]
    return render(
        request,
        "topics.html",
        title="Topics",
        nav="topics",
        rows=rows,
        q=q,
        page=page,
        pages=pages,
        total=len(shown),
        system=system,
        errors=errors,
    )


def _ms(value: str) -> int | None:
    """A ``datetime-local`` field (UTC) or epoch milliseconds, as epoch ms."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a time (YYYY-MM-DDTHH:MM, UTC)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


async def _browse(
    upstream: Upstream, cluster: ClusterSnapshot, topic: str, params: dict[str, str]
) -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    """(messages found, what went wrong, paging facts) for the browser's form."""
    mode = params.get("mode", "")
    readers = cluster.readers()
    if mode == "queue":
        group = params.get("group") or (readers[0].broker.group if readers else "")
        reader = cluster.reader(group)
        if reader is None:
            return [], f"no broker of group {group!r} answers", {}
        try:
            qid = int(params.get("queue") or 0)
            start = int(params.get("from") or 0)
            count = min(BROWSE_MAX, max(1, int(params.get("count") or 20)))
        except ValueError:
            return [], "queue, from and count are whole numbers", {}
        if start < 0 or qid < 0:
            return [], "queue and from cannot be negative", {}
        try:
            page = await upstream.get(
                reader.broker.admin,
                f"/v1/topics/{quote(topic, safe='')}/queues/{qid}/messages",
                **{"from": start, "limit": count},
            )
        except UpstreamError as exc:
            return [], exc.reason, {}
        found = [{**m, "brokerGroup": group} for m in page.get("messages", [])]
        return found, None, {k: page.get(k) for k in ("minOffset", "maxOffset", "nextOffset")}
    if mode == "time":
        try:
            start_ms = _ms(params.get("start", ""))
            end_ms = _ms(params.get("end", ""))
        except ValueError as exc:
            return [], str(exc), {}
        if start_ms is None or end_ms is None:
            return [], "give both a start and an end time", {}
        if end_ms < start_ms:
            return [], "the end is before the start", {}
        calls = [
            upstream.get(
                r.broker.admin,
                f"/v1/topics/{quote(topic, safe='')}/messages",
                start=start_ms,
                end=end_ms,
                limit=BROWSE_MAX,
            )
            for r in readers
        ]
        out: list[dict[str, Any]] = []
        problems = []
        truncated = False
        for r, result in zip(readers, await upstream.gather(calls), strict=True):
            if isinstance(result, UpstreamError):
                problems.append(f"{r.broker.group}: {result.reason}")
                continue
            truncated |= bool(result.get("truncated"))
            out += [{**m, "brokerGroup": r.broker.group} for m in result.get("messages", [])]
        out.sort(key=lambda m: m.get("storeTimestamp", 0))
        return (
            out[:BROWSE_MAX],
            "; ".join(problems) or None,
            {"truncated": truncated or len(out) > BROWSE_MAX},
        )
    if mode == "key":
        key = params.get("key", "").strip()
        if not key:
            return [], "give a key to look for", {}
        calls = [
            upstream.get(r.broker.admin, "/v1/messages", topic=topic, key=key, limit=BROWSE_MAX)
            for r in readers
        ]
        out = []
        problems = []
        for r, result in zip(readers, await upstream.gather(calls), strict=True):
            if isinstance(result, UpstreamError):
                problems.append(f"{r.broker.group}: {result.reason}")
                continue
            out += [{**m, "brokerGroup": r.broker.group} for m in result]
        if not out and not problems:
            return [], f"no message of {topic} has key {key!r}", {}
        return out, "; ".join(problems) or None, {}
    return [], None, {}


@router.get("/topics/{name}", response_class=HTMLResponse)
async def topic_page(request: Request, name: str) -> HTMLResponse:
    who = viewer(request)
    if not who.may_see_topic(name):
        raise Refused(f"you have no permission on topic {name!r}")
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config)
    topic, errors = await read_topic(console.upstream, cluster, name)
    if topic is None:
        return render(
            request,
            "refused.html",
            404,
            title="Unknown topic",
            message=f"no broker group knows a topic named {name!r}",
            errors=errors,
        )
    params = dict(request.query_params)
    messages: list[dict[str, Any]] = []
    browse_error = None
    paging: dict[str, Any] = {}
    if params.get("mode"):
        if not who.may_read_topic(name):
            raise Refused(f"reading messages of {name!r} needs sub permission on it")
        messages, browse_error, paging = await _browse(console.upstream, cluster, name, params)
    live = await console.stats.get(console.upstream, cluster)
    return render(
        request,
        "topic.html",
        title=f"Topic {name}",
        nav="topics",
        topic=topic,
        rate=live.produce_rate(name),
        groups=cluster.broker_groups(),
        params=params,
        messages=messages,
        browse_error=browse_error,
        paging=paging,
        errors=errors + live.errors,
        can_read=who.may_read_topic(name),
        can_send=who.admin,
    )


@router.post("/topics/{name}/send")
async def send_test(request: Request, name: str) -> Response:
    form = await request.form()
    who = check_post(request, form)
    if not who.admin:
        raise Refused("sending a test message is for administrators")
    console = console_of(request)
    body = str(form.get("body") or "")
    key = str(form.get("key") or "").strip()
    tag = str(form.get("tag") or "").strip()
    response = RedirectResponse(f"/topics/{quote(name, safe='')}", status_code=303)
    if len(body.encode()) > TEST_BODY_MAX:
        flash(
            request,
            response,
            f"a test message body is at most {TEST_BODY_MAX // 1024} KiB",
            "error",
        )
        return response
    cluster = await read_cluster(console.upstream, console.config)
    masters = [m for g in cluster.broker_groups() if (m := cluster.master(g)) is not None]
    if not masters:
        flash(request, response, "no broker group has a master: nothing can be sent now", "error")
        return response
    payload = {
        "bodyBase64": base64.b64encode(body.encode()).decode(),
        "keys": [key] if key else [],
        "tag": tag or None,
        "properties": {"sentBy": f"console:{who.name}"},
    }
    try:
        sent = await console.upstream.post_json(
            masters[0].broker.admin, f"/v1/topics/{quote(name, safe='')}/messages", payload
        )
    except UpstreamError as exc:
        console.audit.record(who.name, "send-test-message", name, f"failed: {exc.reason}")
        flash(request, response, f"the test message was not sent: {exc.reason}", "error")
        return response
    console.audit.record(who.name, "send-test-message", name, "sent", **sent)
    flash(
        request,
        response,
        f"sent message {sent.get('messageId')} to queue {sent.get('queueId')} at offset "
        f"{sent.get('queueOffset')} on {masters[0].broker.group}",
    )
    return response
