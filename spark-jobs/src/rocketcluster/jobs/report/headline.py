"""The report's first lines: one per problem, worst first, so the on-call engineer
knows in one glance whether to read further and where.

Consumer groups and broker groups share one severity scale: an unclean election (data
may be lost) or a group with no master now ranks with ERR; a failover that left the
group without a master ranks with STALL; a clean switch-over with REWIND; flapping
replicas with WARN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report.frames import as_int, is_null, severity, table
from rocketcluster.jobs.tables import LAG_GROUPS, SSS_GROUPS, SSS_MASTERS


@dataclass(frozen=True)
class Problem:
    """One headline line: ``text`` is what a person reads, ``anchor`` where the
    details are."""

    severity: int
    status: str  # the badge: a lag status, or UNCLEAN / NO MASTER / FAILOVER / FLAPS
    subject: str
    text: str
    anchor: str
    magnitude: float = 0.0  # orders problems of one severity (bigger first)


def anchor(kind: str, name: str) -> str:
    """A stable element id for a group's details."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
    return f"{kind}-{safe}"


def lag_problems(results: Mapping[str, Any]) -> list[Problem]:
    """Every consumer group whose status is not OK, with the job's reason sentence."""
    groups = table(results, LAG_GROUPS)
    out = []
    for r in groups.frame.itertuples():
        status = str(r.status).upper()
        if status == "OK":
            continue
        reason = "" if is_null(r.reason) else str(r.reason).strip()
        out.append(
            Problem(
                severity=severity(status),
                status=status,
                subject=str(r.consumer_group),
                text=f"{r.consumer_group}: {status} — {reason or 'no reason given'}",
                anchor=anchor("lag", str(r.consumer_group)),
                magnitude=float(as_int(r.max_lag_ms)),
            )
        )
    return out


def _masterless_now(results: Mapping[str, Any], window_end: int | None) -> dict[str, int]:
    """Broker groups whose last master interval has no master and reaches the window's
    end: group → since when."""
    masters = table(results, SSS_MASTERS)
    if not masters.ready:
        return {}
    out = {}
    for group, rows in masters.frame.groupby("broker_group"):
        last = rows.sort_values("start").iloc[-1]
        reaches_end = is_null(last["end"]) or window_end is None or last["end"] >= window_end
        if is_null(last["master_id"]) and reaches_end:
            out[str(group)] = int(last["start"])
    return out


def sss_line(group: str, elections: int, without_ms: int, unclean: int, flaps: int = 0) -> str:
    """``broker-0: 1 election, 0.31 s without master, unclean 0`` (and flaps, if any)."""
    line = (
        f"{group}: {fmt.plural(elections, 'election')}, "
        f"{fmt.duration(without_ms)} without master, unclean {unclean}"
    )
    return line + (f", {fmt.plural(flaps, 'flap')}" if flaps else "")


def sss_problems(results: Mapping[str, Any], window_end: int | None) -> list[Problem]:
    """Broker groups that lost or changed their master, or whose replicas flapped."""
    groups = table(results, SSS_GROUPS)
    headless = _masterless_now(results, window_end)
    out = []
    for r in groups.frame.itertuples():
        group = str(r.broker_group)
        elections = as_int(r.elections)
        unclean = as_int(r.unclean_elections)
        without = as_int(r.time_without_master_ms)
        flaps = as_int(r.flaps)
        text = sss_line(group, elections, without, unclean, flaps)
        if group in headless:
            status, sev = "NO MASTER", 5
            text += f"; no master since {fmt.utc(headless[group])}"
        elif unclean:
            status, sev = "UNCLEAN", 5
        elif without or elections or as_int(r.master_changes):
            status, sev = "FAILOVER", 3 if without else 2
        elif flaps:
            status, sev = "FLAPS", 1
        else:
            continue
        out.append(Problem(sev, status, group, text, anchor("sss", group), float(without)))
    return out


def problems(results: Mapping[str, Any], window_end: int | None) -> list[Problem]:
    """All problems, worst first: severity, then magnitude, then name."""
    found = lag_problems(results) + sss_problems(results, window_end)
    return sorted(found, key=lambda p: (-p.severity, -p.magnitude, p.subject))
