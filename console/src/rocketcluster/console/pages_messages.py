"""One message: every stored copy (the topic's, a DLQ copy, a resent one), its body as
text, pretty JSON or hex with a download of the whole body, its properties and system
properties, and its trace — sent, stored, in the SyncStateSet, delivered, acked,
expired, dead-lettered — merged from the broker groups that recorded it."""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from rocketcluster.console.cluster import read_cluster
from rocketcluster.console.upstream import UpstreamError
from rocketcluster.console.web import Refused, console_of, render, viewer

router = APIRouter()
MESSAGE_ID = re.compile(r"^[0-9A-Za-z_-]{1,128}$")
HEX_BYTES = 1024


def body_views(message: dict[str, Any]) -> dict[str, Any]:
    """The preview the broker sent, as text, pretty JSON (when it is JSON) and hex."""
    raw = base64.b64decode(message.get("bodyBase64") or "")
    text = message.get("bodyText")
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    lines = []
    for at in range(0, min(len(raw), HEX_BYTES), 16):
        chunk = raw[at : at + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {printable}")
    return {"text": text, "json": pretty, "hex": "\n".join(lines), "previewBytes": len(raw)}


@router.get("/find")
async def find(request: Request, id: str = "") -> Response:
    viewer(request)
    target = id.strip()
    if not target:
        return RedirectResponse("/topics", status_code=303)
    return RedirectResponse(f"/messages/{quote(target, safe='')}", status_code=303)


@router.get("/messages/{message_id}", response_class=HTMLResponse)
async def message_page(request: Request, message_id: str, view: str = "text") -> HTMLResponse:
    who = viewer(request)
    console = console_of(request)
    if not MESSAGE_ID.match(message_id):
        return render(
            request,
            "message.html",
            400,
            title="Message",
            message_id=message_id[:128],
            copies=[],
            events=[],
            errors=[f"{message_id[:128]!r} is not a message id (letters, digits, - and _)"],
            view=view,
        )
    cluster = await read_cluster(console.upstream, console.config)
    readers = cluster.readers()
    lookups = [console.upstream.get(r.broker.admin, f"/v1/messages/{message_id}") for r in readers]
    traces = [
        console.upstream.get(r.broker.admin, f"/v1/messages/{message_id}/trace") for r in readers
    ]
    results = await console.upstream.gather(lookups + traces)
    copies: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    errors: list[str] = []
    for r, found in zip(readers, results[: len(readers)], strict=True):
        if isinstance(found, UpstreamError):
            if found.status != 404:
                errors.append(f"{r.broker.group}: {found.reason}")
            continue
        for m in found:
            if not who.may_read_topic(m.get("topic", "")):
                errors.append(f"a copy in topic {m.get('topic')!r} is hidden: no sub permission")
                continue
            copies.append({**m, "brokerGroup": r.broker.group, "views": body_views(m)})
    seen = set()
    for r, trace in zip(readers, results[len(readers) :], strict=True):
        if isinstance(trace, UpstreamError):
            if trace.status != 404:
                errors.append(f"trace on {r.broker.group}: {trace.reason}")
            continue
        for e in trace.get("events", []):
            key = json.dumps(e, sort_keys=True)
            if key not in seen:
                seen.add(key)
                events.append(e)
    if not copies and not events and not errors:
        errors.append(f"no broker group holds a message with id {message_id}")
    if events and not copies and not who.admin:
        topics = {e.get("topic") for e in events if e.get("topic")}
        if not all(who.may_read_topic(str(t)) for t in topics):
            raise Refused("this message's topic is not yours to read")
    events.sort(key=lambda e: (e.get("time", 0), _ORDER.get(str(e.get("type")), 99)))
    return render(
        request,
        "message.html",
        title=f"Message {message_id}",
        nav="topics",
        message_id=message_id,
        copies=copies,
        events=events,
        errors=errors,
        view=view if view in ("text", "json", "hex") else "text",
    )


_ORDER = {
    "sent": 0,
    "stored": 1,
    "replicated": 2,
    "delivered": 3,
    "expired": 4,
    "acked": 5,
    "dead-lettered": 6,
    "resent": 7,
}


@router.get("/messages/{message_id}/body")
async def download_body(
    request: Request, message_id: str, group: str, topic: str, queue: int, offset: int
) -> Response:
    """The whole body of one copy, as the broker stored it (an attachment)."""
    who = viewer(request)
    if not who.may_read_topic(topic):
        raise Refused(f"reading messages of {topic!r} needs sub permission on it")
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config)
    reader = cluster.reader(group)
    if reader is None:
        raise Refused(f"no broker of group {group!r} answers now")
    try:
        upstream = await console.upstream.request(
            "GET",
            reader.broker.admin,
            f"/v1/topics/{quote(topic, safe='')}/queues/{queue}/messages/{offset}/body",
        )
    except UpstreamError as exc:
        return render(request, "refused.html", exc.status or 502, message=exc.reason)
    return Response(
        upstream.content,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{message_id}.bin"',
            "Content-Security-Policy": "default-src 'none'",
        },
    )
