"""The checker: pure functions from a history to verdicts (after Jepsen's total-queue
checker and OpenChaos).

- lost: acknowledged sends never delivered (to a consumer or to the final audit
  read) — must be empty;
- unexpected: deliveries of ids never sent, or of sends that definitely failed —
  must be empty;
- duplicates (one id stored at two positions) and redeliveries (one position handed
  out twice) are counted, not failures: delivery is at-least-once;
- recovered: indeterminate sends that were delivered after all;
- FIFO: per message group, the acknowledged order must be a subsequence of the
  stored order (and of the order a FIFO consumer first saw them in);
- inconsistent offsets: one queue position holding two ids, or an acknowledged
  offset where the message is not;
- recovery time per fault: from the first failed or indeterminate send inside the
  fault window to the next success, until every producer that failed succeeded
  again, and from the heal to the first success;
- drains: after every fault, once the cluster was whole, every consumer group
  consumed its backlog within the bound (drain.py) — a stall fails the run, with
  the broker group, consumer group, queue and offsets that stalled.

Nothing here does I/O, so hand-made histories test every verdict, including the
ones that must fail.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.ctl.chaos.history import FAIL, INFO, INVOKE, OK, Record

SAMPLE = 20  # ids listed per verdict in the summary

Position = tuple[str, str, int, int]  # broker group, topic, queue, queue offset


@dataclass
class SendOp:
    id: str
    invoke_time: float
    process: int | None = None
    topic: str = ""
    mgroup: str = ""
    seq: int = -1
    bgroup: str | None = None
    outcome: str | None = None  # ok | fail | info | None (never completed)
    complete_time: float | None = None
    offset: int | None = None
    # The producer behind the send: a process id changes after every indeterminate
    # outcome (Jepsen's rule), the worker stays.
    worker: str = ""


@dataclass(frozen=True)
class Delivery:
    id: str
    time: float
    source: str  # receive | audit
    topic: str
    bgroup: str
    queue: int
    offset: int
    mgroup: str = ""
    cg: str = ""

    @property
    def position(self) -> Position:
        return (self.bgroup, self.topic, self.queue, self.offset)


@dataclass
class FaultWindow:
    fault_id: int
    kind: str
    start: float
    end: float | None
    targets: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # affected broker groups; [] = all
    skipped: bool = False


# -- collecting -------------------------------------------------------------------


def collect_sends(records: Iterable[Record]) -> dict[str, SendOp]:
    sends: dict[str, SendOp] = {}
    for r in records:
        if r.get("f") != "send" or "id" not in r:
            continue
        kind = r["type"]
        if kind == INVOKE:
            sends.setdefault(
                r["id"],
                SendOp(
                    r["id"],
                    r["time"],
                    r.get("process"),
                    r.get("topic", ""),
                    r.get("mgroup", "") or "",
                    int(r.get("seq", -1)),
                    r.get("bgroup"),
                    worker=r.get("worker", ""),
                ),
            )
            continue
        op = sends.get(r["id"])
        if op is None:  # a completion without an invoke: keep it, the checker says so
            op = sends[r["id"]] = SendOp(r["id"], r["time"], r.get("process"))
        if op.outcome == OK:
            continue  # ok is final
        op.outcome = kind
        op.complete_time = r["time"]
        if kind == OK:
            op.offset = r.get("offset")
            op.bgroup = r.get("bgroup") or op.bgroup
    return sends


def collect_deliveries(records: Iterable[Record]) -> list[Delivery]:
    out = []
    for r in records:
        if r.get("type") == OK and r.get("f") in ("receive", "audit") and "id" in r:
            out.append(
                Delivery(
                    r["id"],
                    r["time"],
                    r["f"],
                    r.get("topic", ""),
                    r.get("bgroup", ""),
                    int(r.get("queue", -1)),
                    int(r.get("offset", -1)),
                    r.get("mgroup", "") or "",
                    r.get("cg", ""),
                )
            )
    return out


def collect_faults(records: Iterable[Record]) -> list[FaultWindow]:
    faults: dict[int, FaultWindow] = {}
    for r in records:
        if r.get("f") != "fault":
            continue
        fid = int(r["fault_id"])
        if r.get("phase") == "start":
            faults[fid] = FaultWindow(
                fid,
                r["kind"],
                r["time"],
                None,
                list(r.get("targets", [])),
                list(r.get("groups", [])),
                bool(r.get("skipped", False)),
            )
        elif r.get("phase") == "end" and fid in faults:
            faults[fid].end = r["time"]
    return sorted(faults.values(), key=lambda f: f.start)


def collect_drains(records: Iterable[Record]) -> list[Record]:
    """The drain checks run after each episode (drain.py), in order."""
    return [r for r in records if r.get("f") == "note" and r.get("event") == "drain"]


def drain_summary(drains: Sequence[Record]) -> dict[str, Any]:
    stalls = [d for d in drains if not d.get("complete")]
    seconds = [float(d["seconds"]) for d in drains if d.get("complete")]
    return {
        "checks": len(drains),
        "stalls": len(stalls),
        "p50_s": percentile(seconds, 50),
        "max_s": max(seconds) if seconds else None,
        "stalled": [
            {
                "episode": d.get("episode", ""),
                "seconds": d.get("seconds"),
                "queues": d.get("stalled_queues"),
                "sample": d.get("stalled", [])[:5],
            }
            for d in stalls[:SAMPLE]
        ],
    }


# -- verdicts -----------------------------------------------------------------------


def lost(sends: dict[str, SendOp], deliveries: Sequence[Delivery]) -> list[str]:
    seen = {d.id for d in deliveries}
    return sorted(i for i, s in sends.items() if s.outcome == OK and i not in seen)


def unexpected(sends: dict[str, SendOp], deliveries: Sequence[Delivery]) -> list[str]:
    """Delivered ids never invoked, or whose send definitely failed."""
    out = set()
    for d in deliveries:
        op = sends.get(d.id)
        if op is None or op.outcome == FAIL:
            out.add(d.id)
    return sorted(out)


def recovered(sends: dict[str, SendOp], deliveries: Sequence[Delivery]) -> list[str]:
    """Indeterminate (or never completed) sends that were delivered after all."""
    seen = {d.id for d in deliveries}
    return sorted(i for i, s in sends.items() if s.outcome in (INFO, None) and i in seen)


def duplicates(deliveries: Sequence[Delivery]) -> dict[str, list[Position]]:
    """Ids stored at more than one position (a retried send stored twice)."""
    positions: dict[str, set[Position]] = defaultdict(set)
    for d in deliveries:
        positions[d.id].add(d.position)
    return {i: sorted(p) for i, p in positions.items() if len(p) > 1}


def redeliveries(deliveries: Sequence[Delivery]) -> int:
    """Deliveries of a position beyond its first, per consumer group (and the audit)."""
    seen: set[tuple[str, Position]] = set()
    extra = 0
    for d in deliveries:
        key = (d.cg or d.source, d.position)
        if key in seen:
            extra += 1
        seen.add(key)
    return extra


def inconsistent_offsets(
    sends: dict[str, SendOp], deliveries: Sequence[Delivery]
) -> list[dict[str, Any]]:
    """One position holding two ids; an acknowledged (broker group, offset) where the
    delivered message is not."""
    at: dict[Position, set[str]] = defaultdict(set)
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for d in deliveries:
        at[d.position].add(d.id)
        where[d.id].add((d.bgroup, d.offset))
    problems: list[dict[str, Any]] = [
        {"position": list(p), "ids": sorted(ids)} for p, ids in sorted(at.items()) if len(ids) > 1
    ]
    for i, op in sorted(sends.items()):
        if op.outcome != OK or op.offset is None or i not in where:
            continue
        places = where[i]
        if op.bgroup:
            matched = (op.bgroup, op.offset) in places
        else:
            matched = any(off == op.offset for _, off in places)
        if not matched:
            problems.append(
                {
                    "id": i,
                    "acknowledged": [op.bgroup, op.offset],
                    "delivered": sorted([list(p) for p in places]),
                }
            )
    return problems


def _is_subsequence(wanted: Sequence[str], sequence: Sequence[str]) -> int | None:
    """None when ``wanted`` is a subsequence of ``sequence``; otherwise the index in
    ``wanted`` of the first element that could not be matched in order."""
    position = 0
    for index, item in enumerate(wanted):
        while position < len(sequence) and sequence[position] != item:
            position += 1
        if position == len(sequence):
            return index
        position += 1
    return None


def _acked_order(sends: dict[str, SendOp], missing: set[str]) -> dict[str, list[str]]:
    per_group: dict[str, list[SendOp]] = defaultdict(list)
    for op in sends.values():
        if op.mgroup and op.outcome == OK and op.id not in missing:
            per_group[op.mgroup].append(op)
    return {
        g: [o.id for o in sorted(ops, key=lambda o: (o.seq, o.invoke_time))]
        for g, ops in per_group.items()
    }


def fifo_violations(
    sends: dict[str, SendOp], deliveries: Sequence[Delivery]
) -> list[dict[str, Any]]:
    """Per message group, the acknowledged order must be a subsequence of the stored
    order (every delivered position, ordered by queue offset). Lost ids are left out
    here: they are reported as lost."""
    missing = set(lost(sends, deliveries))
    stored: dict[str, dict[Position, str]] = defaultdict(dict)
    for d in deliveries:
        if d.mgroup:
            stored[d.mgroup].setdefault(d.position, d.id)
    problems: list[dict[str, Any]] = []
    for group, wanted in sorted(_acked_order(sends, missing).items()):
        positions = stored.get(group, {})
        queues = sorted({(p[0], p[1], p[2]) for p in positions})
        if len(queues) > 1:
            problems.append(
                {"mgroup": group, "problem": "stored in several queues", "queues": queues}
            )
            continue
        sequence = [positions[p] for p in sorted(positions)]
        bad = _is_subsequence(wanted, sequence)
        if bad is not None:
            problems.append(
                {
                    "mgroup": group,
                    "problem": "acknowledged order is not the stored order",
                    "out_of_order": wanted[bad],
                    "acknowledged_before": wanted[max(0, bad - 3) : bad],
                }
            )
    return problems


def consumer_fifo_violations(
    sends: dict[str, SendOp], deliveries: Sequence[Delivery]
) -> list[dict[str, Any]]:
    """Per message group, a FIFO consumer group must first see acknowledged messages in
    the order they were acknowledged (redeliveries of earlier ones are fine)."""
    missing = set(lost(sends, deliveries))
    first_seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for d in sorted(deliveries, key=lambda d: d.time):
        if d.source != "receive" or not d.mgroup:
            continue
        if (d.cg, d.id) in seen:
            continue
        seen.add((d.cg, d.id))
        first_seen[(d.cg, d.mgroup)].append(d.id)
    problems: list[dict[str, Any]] = []
    acked = _acked_order(sends, missing)
    for (cg, group), order in sorted(first_seen.items()):
        wanted_set = set(order)
        wanted = [i for i in acked.get(group, []) if i in wanted_set]
        bad = _is_subsequence(wanted, order)
        if bad is not None:
            problems.append(
                {
                    "cg": cg,
                    "mgroup": group,
                    "problem": "a FIFO consumer saw acknowledged messages out of order",
                    "out_of_order": wanted[bad],
                }
            )
    return problems


def consumer_missed(
    sends: dict[str, SendOp], deliveries: Sequence[Delivery]
) -> dict[str, list[str]]:
    """Acknowledged ids the audit read but a live consumer group of their topic
    never received (reported, not a failure: the audit is the source of truth)."""
    by_topic: dict[str, set[str]] = defaultdict(set)
    got: dict[str, set[str]] = defaultdict(set)
    for d in deliveries:
        if d.source == "receive" and d.cg:
            by_topic[d.topic].add(d.cg)
            got[d.cg].add(d.id)
    out: dict[str, list[str]] = {}
    for topic, groups in by_topic.items():
        acked = {i for i, s in sends.items() if s.outcome == OK and s.topic == topic}
        for cg in groups:
            miss = sorted(acked - got[cg])
            if miss:
                out[cg] = miss
    return out


# -- recovery -------------------------------------------------------------------------


def fault_recovery(sends: Iterable[SendOp], fault: FaultWindow) -> dict[str, Any]:
    """Client-seen recovery for one fault, over the sends of the broker groups it hit
    (all of them when it hit the controllers or everything).

    ``recovery_s``: from the first failed/indeterminate send inside the window (its
    invoke, or the fault start if it was invoked before) to the completion of the next
    successful send invoked after it; 0 when no send failed; None when none succeeded
    afterwards. ``after_heal_s``: from the heal to the completion of the first
    successful send invoked after it. ``last_error_s``: from the fault start to the
    last failure it caused (how long some clients still saw errors).
    ``all_recovered_s``, the strict figure: from that first failure until every
    producer process that failed had a send succeed after its own last failure
    (None when one never did) — one healthy producer is not a healthy cluster."""
    end = fault.end if fault.end is not None else math.inf
    groups = set(fault.groups)
    ops = [
        s
        for s in sends
        if s.complete_time is not None and (not groups or s.bgroup is None or s.bgroup in groups)
    ]
    errors = [
        s
        for s in ops
        if s.outcome in (FAIL, INFO)
        and s.complete_time is not None
        and s.complete_time >= fault.start
        and s.invoke_time <= end
    ]
    out: dict[str, Any] = {
        "errors": len(errors),
        "recovery_s": 0.0,
        "after_heal_s": None,
        "last_error_s": None,
        "all_recovered_s": 0.0,
    }
    if errors:
        last = max(s.complete_time for s in errors if s.complete_time is not None)
        out["last_error_s"] = round(last - fault.start, 3)
        began = max(fault.start, min(s.invoke_time for s in errors))
        later = [
            s.complete_time
            for s in ops
            if s.outcome == OK and s.invoke_time >= began and s.complete_time is not None
        ]
        out["recovery_s"] = round(min(later) - began, 3) if later else None
        healthy = _every_process_recovered(ops, errors)
        out["all_recovered_s"] = None if healthy is None else round(healthy - began, 3)
    if fault.end is not None:
        after = [
            s.complete_time
            for s in ops
            if s.outcome == OK and s.invoke_time >= fault.end and s.complete_time is not None
        ]
        out["after_heal_s"] = round(min(after) - fault.end, 3) if after else None
    return out


def _every_process_recovered(ops: Sequence[SendOp], errors: Sequence[SendOp]) -> float | None:
    """When the last producer that failed had a send invoked after its own last failure
    succeed (None if one never did). A producer is its worker (its process in
    histories written before workers were recorded)."""
    last_failure: dict[str | int | None, float] = {}
    for s in errors:
        if s.complete_time is not None:
            who = s.worker or s.process
            last_failure[who] = max(last_failure.get(who, s.invoke_time), s.invoke_time)
    healthy = 0.0
    for who, failed_at in last_failure.items():
        ok = [
            s.complete_time
            for s in ops
            if (s.worker or s.process) == who
            and s.outcome == OK
            and s.invoke_time >= failed_at
            and s.complete_time is not None
        ]
        if not ok:
            return None
        healthy = max(healthy, min(ok))
    return healthy


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def recovery_by_kind(faults: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in faults:
        if not f.get("skipped"):
            kinds[f["kind"]].append(f)
    out = {}
    for kind, items in sorted(kinds.items()):
        rec = [f["recovery_s"] for f in items if f["recovery_s"] is not None]
        heal = [f["after_heal_s"] for f in items if f["after_heal_s"] is not None]
        whole = [f["all_recovered_s"] for f in items if f["all_recovered_s"] is not None]
        out[kind] = {
            "count": len(items),
            "never_recovered": sum(1 for f in items if f["recovery_s"] is None),
            "recovery_p50_s": percentile(rec, 50),
            "recovery_p99_s": percentile(rec, 99),
            "recovery_max_s": max(rec) if rec else None,
            "after_heal_p50_s": percentile(heal, 50),
            "after_heal_p99_s": percentile(heal, 99),
            "all_recovered_p50_s": percentile(whole, 50),
            "all_recovered_p99_s": percentile(whole, 99),
            "not_all_recovered": sum(1 for f in items if f["all_recovered_s"] is None),
        }
    return out


# -- the summary ------------------------------------------------------------------------


def _sample(ids: Sequence[str]) -> dict[str, Any]:
    return {"count": len(ids), "sample": list(ids[:SAMPLE])}


def check(records: Sequence[Record]) -> dict[str, Any]:
    """Every verdict over one history; ``valid`` is False when anything that must be
    empty is not."""
    sends = collect_sends(records)
    deliveries = collect_deliveries(records)
    faults = collect_faults(records)
    outcome_counts: dict[str, int] = defaultdict(int)
    for op in sends.values():
        outcome_counts[op.outcome or "pending"] += 1
    lost_ids = lost(sends, deliveries)
    unexpected_ids = unexpected(sends, deliveries)
    fifo = fifo_violations(sends, deliveries)
    consumer_fifo = consumer_fifo_violations(sends, deliveries)
    inconsistent = inconsistent_offsets(sends, deliveries)
    dupes = duplicates(deliveries)
    fault_rows = []
    for f in faults:
        row: dict[str, Any] = {
            "id": f.fault_id,
            "kind": f.kind,
            "start": f.start,
            "end": f.end,
            "targets": f.targets,
            "groups": f.groups,
            "skipped": f.skipped,
        }
        if not f.skipped:
            row.update(fault_recovery(sends.values(), f))
        fault_rows.append(row)
    by_kind_count: dict[str, int] = defaultdict(int)
    skipped: dict[str, int] = defaultdict(int)
    for f in faults:
        (skipped if f.skipped else by_kind_count)[f.kind] += 1
    missed = consumer_missed(sends, deliveries)
    drains = drain_summary(collect_drains(records))
    valid = not (
        lost_ids or unexpected_ids or fifo or consumer_fifo or inconsistent or drains["stalls"]
    )
    return {
        "valid": valid,
        "sends": {"invoked": len(sends), **dict(sorted(outcome_counts.items()))},
        "deliveries": {
            "receive": sum(1 for d in deliveries if d.source == "receive"),
            "audit": sum(1 for d in deliveries if d.source == "audit"),
            "distinct_ids": len({d.id for d in deliveries}),
        },
        "lost": _sample(lost_ids),
        "unexpected": _sample(unexpected_ids),
        "duplicates": _sample(sorted(dupes)),
        "redeliveries": redeliveries(deliveries),
        "recovered": _sample(recovered(sends, deliveries)),
        "fifo": {
            "message_groups": len({op.mgroup for op in sends.values() if op.mgroup}),
            "violations": fifo[:SAMPLE],
            "violation_count": len(fifo),
            "consumer_violations": consumer_fifo[:SAMPLE],
            "consumer_violation_count": len(consumer_fifo),
        },
        "inconsistent_offsets": {"count": len(inconsistent), "sample": inconsistent[:SAMPLE]},
        "consumer_missed": {cg: _sample(ids) for cg, ids in sorted(missed.items())},
        "drains": drains,
        "faults_by_kind": dict(sorted(by_kind_count.items())),
        "faults_skipped": dict(sorted(skipped.items())),
        "recovery_by_kind": recovery_by_kind(fault_rows),
        "faults": fault_rows,
    }
