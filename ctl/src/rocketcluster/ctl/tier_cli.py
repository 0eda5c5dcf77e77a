"""`rocketctl tier status` and `rocketctl tier flush`: tiered storage on every broker.

``status`` asks each broker's admin API (``GET /v1/tier``) and prints a few lines per
broker — health first, then upload lag, what the tier holds, uploads and cold reads —
and with ``--queues`` a table per queue; ``--json`` prints the brokers' documents as
they answered. The exit code is 1 when a broker is unhealthy or does not answer.

The brokers are a local cluster's (its state in ``--dir``) or the ``--admin``
addresses given. Rendering is pure (:func:`status_lines`), the HTTP calls are the
AdminClient's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from rocketcluster.api.client.admin import AdminClient, AdminError
from rocketcluster.api.tls import ClientTls
from rocketcluster.api.units import binary_size
from rocketcluster.ctl.admin_cli import ADMIN_ENV
from rocketcluster.ctl.admin_token import admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime, client_tls

# A status call is cheap; a broker that takes longer than this is reported as not
# answering rather than holding up the lines of the others.
TIMEOUT_S: Final = 5.0
# Longer: a flush uploads everything pending before it answers.
FLUSH_TIMEOUT_S: Final = 120.0
_HOLES_SHOWN: Final = 3


@dataclass(frozen=True)
class Target:
    """One broker to ask: how the lines name it (the process name of a local cluster,
    else its address) and its admin address."""

    label: str
    admin: str
    # The local cluster's CA and rocketctl's certificate when it runs TLS.
    tls: ClientTls | None = None
    token: str | None = None  # security.auth: the admin token (admin_token.py)


@dataclass(frozen=True)
class TierAnswer:
    """A broker's ``GET /v1/tier`` document, or why there is none."""

    target: Target
    document: dict[str, Any] | None = None
    error: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.document and self.document.get("enabled"))

    @property
    def ok(self) -> bool:
        """Answered, and tiering is off or its backend is healthy."""
        if self.document is None:
            return False
        return not self.enabled or bool(self.document.get("healthy"))


def targets(directory: Path, given: tuple[str, ...]) -> list[Target]:
    """The ``--admin`` addresses, else every broker of the local cluster in
    ``directory`` (from its own state: no port convention needed)."""
    if given:
        return [Target(a, a, token=admin_token(None)) for a in dict.fromkeys(given)]
    state = LocalRuntime(directory).state()
    if state is None:
        raise click.ClickException(
            f"no local cluster runs in {directory}: give --admin HOST:PORT (repeatable, or "
            f"${ADMIN_ENV}), or start one with `rocketctl local up --dir {directory}`"
        )
    found = [
        Target(
            str(p["name"]), str(p["addresses"]["admin"]), client_tls(state), admin_token(directory)
        )
        for p in state["processes"]
        if p["role"] == "broker"
    ]
    if not found:
        raise click.ClickException(f"the cluster in {directory} has no broker")
    return found


def ask(target: Target, timeout: float = TIMEOUT_S) -> TierAnswer:
    try:
        with AdminClient(
            target.admin, timeout=timeout, tls=target.tls, token=target.token
        ) as client:
            return TierAnswer(target, document=client.tier_status())
    except AdminError as exc:
        return TierAnswer(target, error=str(exc))


# -- numbers for people ------------------------------------------------------------


def seconds(s: float) -> str:
    """A duration in its two largest units: ``0.4 s``, ``12 s``, ``3 min 20 s``,
    ``2 h 5 min``, ``3 d 4 h``."""
    if s < 10:
        return f"{s:.1f} s" if s else "0 s"
    total = round(s)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _n(count: int, noun: str, plural: str = "") -> str:
    """``1 segment``, ``1,500 segments``."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _utc(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _holes(holes: list[list[int]]) -> str:
    """Offset ranges missing from the tier (``[start, end)``), the first few."""
    if not holes:
        return "-"
    shown = ",".join(f"{a}..{b}" for a, b in holes[:_HOLES_SHOWN])
    more = len(holes) - _HOLES_SHOWN
    return shown + (f" (+{more})" if more > 0 else "")


# -- the lines -----------------------------------------------------------------------


def broker_lines(answer: TierAnswer, with_queues: bool = False) -> list[str]:
    """A broker's state in a few lines, the verdict first."""
    head = answer.target.label
    doc = answer.document
    if doc is None:
        return [f"{head}: UNREACHABLE: {answer.error}"]
    if not answer.enabled:
        return [f"{head}: tiered storage is off"]
    state = "ok" if doc.get("healthy") else "UNHEALTHY"
    role = "uploading (master)" if doc.get("uploading") else "not uploading (slave)"
    lines = [f"{head}: {state}, {role}, {doc['backend']}, read policy {doc['readPolicy']}"]
    if not doc.get("healthy"):
        lines.append(f"  last error   {doc.get('lastError') or 'none recorded'}")
    lines.append(
        f"  upload lag   {binary_size(doc['lagBytes'])}, {seconds(float(doc['lagSeconds']))} "
        f"({_n(doc['pendingMessages'], 'message')} pending)"
    )
    retention = doc.get("remoteRetention") or {}
    lines.append(
        f"  in the tier  {binary_size(doc['tierBytes'])} in {_n(doc['segments'], 'segment')}, "
        f"{_n(len(doc.get('queues') or []), 'queue')}; remote retention "
        f"{float(retention.get('hours', 0)):g} h "
        f"({_n(retention.get('deletedSegments', 0), 'segment')} deleted)"
    )
    up = doc["uploads"]
    if doc.get("uploading") or up["segments"] or up["errors"]:  # a slave never uploaded
        lines.append(
            f"  uploaded     {_n(up['messages'], 'message')}, {binary_size(up['bytes'])} in "
            f"{_n(up['segments'], 'segment')}; {_n(up['errors'], 'error')}"
        )
    rd = doc["reads"]
    lines.append(
        f"  cold reads   {rd['reads']:,} ({_n(rd['messages'], 'message')}), "
        f"{_n(rd['fetches'], 'fetch', 'fetches')} ({binary_size(rd['fetchedBytes'])}), "
        f"{_n(rd['cacheHits'], 'cache hit')}; {_n(rd['fallbacks'], 'fallback')}, "
        f"{_n(rd['errors'], 'error')}"
    )
    if with_queues:
        lines += ["  " + row for row in queue_table(doc.get("queues") or [])]
    return lines


def queue_table(queues: list[dict[str, Any]]) -> list[str]:
    """What the tier holds per queue, one row each (offsets ``[start, committed)``)."""
    if not queues:
        return ["(no queue has data in the tier yet)"]
    header = ("topic", "queue", "offsets", "segments", "size", "oldest (UTC)", "holes")
    rows = [
        (
            str(q["topic"]),
            str(q["queueId"]),
            f"{q['startOffset']}..{q['committedOffset']}",
            f"{q['segments']:,}",
            binary_size(q["bytes"]),
            _utc(q.get("oldestStoreTime")),
            _holes(q.get("holes") or []),
        )
        for q in queues
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    right = {1, 3, 4}  # numbers

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]


def summary_line(answers: list[TierAnswer]) -> str:
    unreachable = sum(1 for a in answers if a.document is None)
    unhealthy = sum(1 for a in answers if a.enabled and not a.ok)
    off = sum(1 for a in answers if a.document is not None and not a.enabled)
    healthy = len(answers) - unreachable - unhealthy - off
    parts = [f"{healthy} ok"]
    parts += [f"{unhealthy} unhealthy"] if unhealthy else []
    parts += [f"{unreachable} unreachable"] if unreachable else []
    parts += [f"{off} with tiered storage off"] if off else []
    noun = "broker" if len(answers) == 1 else "brokers"
    return f"{len(answers)} {noun}: {', '.join(parts)}"


def status_lines(answers: list[TierAnswer], with_queues: bool = False) -> list[str]:
    lines: list[str] = []
    for answer in answers:
        lines += broker_lines(answer, with_queues)
    lines.append(summary_line(answers))
    return lines


def status_json(answers: list[TierAnswer]) -> list[dict[str, Any]]:
    """Each broker's document as it answered (``error`` instead when it did not)."""
    return [
        {"broker": a.target.label, "admin": a.target.admin}
        | ({"tier": a.document} if a.document is not None else {"error": a.error})
        for a in answers
    ]


# -- the commands --------------------------------------------------------------------


def _options(f: Any) -> Any:
    f = click.option(
        "--admin",
        "admins",
        multiple=True,
        envvar=ADMIN_ENV,
        metavar="HOST:PORT",
        help="a broker's admin address instead of the local cluster's brokers (repeatable)",
    )(f)
    return click.option(
        "--dir",
        "directory",
        type=click.Path(path_type=Path),
        default=Path(".rocketcluster"),
        show_default=True,
        help="the local cluster's directory (used when --admin is not given)",
    )(f)


@click.group("tier")
def tier() -> None:
    """Tiered storage on each broker: health, upload lag, what the tier holds."""


@tier.command("status")
@_options
@click.option("--queues", "with_queues", is_flag=True, help="also a table per queue")
@click.option("--json", "as_json", is_flag=True, help="the brokers' documents, as JSON")
def status(directory: Path, admins: tuple[str, ...], with_queues: bool, as_json: bool) -> None:
    """Health, upload lag and size of each broker's tier.

    A few lines per broker: whether it uploads (the master), its backend, health
    (the last error when unhealthy), upload lag, what the tier holds, uploads and
    cold reads. Exit code 1 when a broker is unhealthy or does not answer."""
    answers = [ask(t) for t in targets(directory, admins)]
    if as_json:
        click.echo(json.dumps(status_json(answers), indent=2))
    else:
        click.echo("\n".join(status_lines(answers, with_queues)))
    if not all(a.ok for a in answers):
        raise SystemExit(1)


@tier.command("flush")
@_options
def flush(directory: Path, admins: tuple[str, ...]) -> None:
    """Upload everything pending now.

    Each group's master uploads; its slaves have nothing to. Exit code 1 when a
    broker does not answer or cannot upload."""
    failed = False
    for target in targets(directory, admins):
        try:
            with AdminClient(
                target.admin, timeout=FLUSH_TIMEOUT_S, tls=target.tls, token=target.token
            ) as client:
                done = client.tier_flush()
        except AdminError as exc:
            failed = True
            reason = "UNREACHABLE" if exc.unreachable else "FAILED"
            click.echo(f"{target.label}: {reason}: {exc.detail if exc.status else exc}")
            continue
        if done.uploading:
            click.echo(f"{target.label}: uploaded {_n(done.segments, 'segment')}")
        else:
            click.echo(f"{target.label}: not uploading (slave): its master uploads")
    if failed:
        raise SystemExit(1)


COMMANDS = [tier]
