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
  the broker group, consumer group, queue and offsets that stalled;
- delivered after an ack: a position delivered to a consumer group by a receive
  *invoked after* that group's ack of it had succeeded (its ``ok``; per group,
  counted with a few examples). A violation, must be 0: the broker answers an ack
  only once its POP journal record is stored and replicated like a send
  (pop_journal.py), and only a SyncStateSet member can be elected, so an ack
  acknowledged is as durable as a send acknowledged — a failover that forgets it
  has lost an acknowledged write. A receive invoked *before* the ack completed may
  still legitimately return the message (its invisibility expired while the ack
  was on its way): that is a redelivery, counted as such, not this.

Sessions: a resumed run appends a new session to the same history (history.py);
times of different sessions come from different monotonic clocks, so every
ordering here is by (session, time) and a fault's recovery is measured over the
sends of its own session only. The collection is one pass over the records
(``check`` takes any iterable, e.g. ``iter_history_file``) into compact per-id
state, and the per-fault recovery searches time-sorted indexes instead of
scanning every send per fault, so a multi-hour soak (millions of records) is
checked in minutes.

Nothing here does I/O, so hand-made histories test every verdict, including the
ones that must fail.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.ctl.chaos.history import FAIL, INFO, INVOKE, OK, Record

SAMPLE = 20  # ids listed per verdict in the summary

Position = tuple[str, str, int, int]  # broker group, topic, queue, queue offset
When = tuple[int, float]  # (session, time): times of two sessions are not comparable


@dataclass(slots=True)
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
    session: int = 0


@dataclass(frozen=True, slots=True)
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
    session: int = 0
    invoked: float | None = None  # when the receive that returned it was invoked

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
    session: int = 0
    # Seconds from its episode's last heal until the cluster was whole again (every
    # process back, a Raft leader, every group's master and full SyncStateSet, and
    # where an operator runs, its status current and healthy); None: it never was
    # within the episode's settle time, or no health check followed.
    whole_s: float | None = None


# -- collecting -------------------------------------------------------------------


class Collector:
    """One pass over a history: sends by id, deliveries, acknowledged positions per
    consumer group, fault windows and drain notes. Records without a ``session``
    field (histories written before sessions) take the last one seen, and a
    ``start`` note after the first record opens the next session (histories
    concatenated by hand)."""

    def __init__(self) -> None:
        self.sends: dict[str, SendOp] = {}
        self.deliveries: list[Delivery] = []
        self.faults: dict[tuple[int, int], FaultWindow] = {}
        self.drains: list[Record] = []
        # (consumer group, position) -> when that group's ack of it first succeeded
        self.acks: dict[tuple[str, Position], When] = {}
        self.sessions: set[int] = set()
        self._session = 0
        self._explicit = False
        self._count = 0
        self._receive_invoked: dict[tuple[int, Any], float] = {}
        self._ended_since_health: list[tuple[int, int]] = []

    def add_all(self, records: Iterable[Record]) -> Collector:
        for r in records:
            self.add(r)
        return self

    def _session_of(self, r: Record) -> int:
        given = r.get("session")
        if given is not None:
            self._explicit = True
            self._session = int(given)
        elif (
            not self._explicit
            and self._count
            and r.get("f") == "note"
            and r.get("event") == "start"
        ):
            self._session += 1
        self._count += 1
        self.sessions.add(self._session)
        return self._session

    def add(self, r: Record) -> None:
        session = self._session_of(r)
        f = r.get("f")
        if f == "send":
            if "id" in r:
                self._send(r, session)
        elif f in ("receive", "audit"):
            self._receive(r, session)
        elif f == "ack":
            self._ack(r, session)
        elif f == "fault":
            self._fault(r, session)
        elif f == "note" and r.get("event") == "drain":
            self.drains.append(r)
        elif f == "note" and r.get("event") == "health" and r.get("why") == "episode":
            # The episode's health wait: every fault of the episode ended just before.
            for key in self._ended_since_health:
                if r.get("healthy"):
                    self.faults[key].whole_s = float(r.get("seconds", 0.0))
            self._ended_since_health = []

    def _send(self, r: Record, session: int) -> None:
        kind = r["type"]
        if kind == INVOKE:
            if r["id"] not in self.sends:
                self.sends[r["id"]] = SendOp(
                    r["id"],
                    r["time"],
                    r.get("process"),
                    r.get("topic", ""),
                    r.get("mgroup", "") or "",
                    int(r.get("seq", -1)),
                    r.get("bgroup"),
                    worker=r.get("worker", ""),
                    session=session,
                )
            return
        op = self.sends.get(r["id"])
        if op is None:  # a completion without an invoke: keep it, the checker says so
            op = self.sends[r["id"]] = SendOp(r["id"], r["time"], r.get("process"), session=session)
        if op.outcome == OK:
            return  # ok is final
        op.outcome = kind
        op.complete_time = r["time"]
        if kind == OK:
            op.offset = r.get("offset")
            op.bgroup = r.get("bgroup") or op.bgroup

    def _receive(self, r: Record, session: int) -> None:
        kind = r.get("type")
        if kind == INVOKE:
            self._receive_invoked[(session, r.get("process"))] = r["time"]
            return
        if kind != OK or "id" not in r:
            return
        self.deliveries.append(
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
                session,
                self._receive_invoked.get((session, r.get("process"))),
            )
        )

    def _ack(self, r: Record, session: int) -> None:
        """``acked``: [[id, broker group, queue, offset], ...] — the positions whose
        ack succeeded, on ``ok`` and on ``fail`` (a partial failure) alike."""
        if r.get("type") not in (OK, FAIL) or not r.get("acked"):
            return
        cg, topic = r.get("cg", ""), r.get("topic", "")
        when = (session, float(r["time"]))
        for _mid, bgroup, queue, offset in r["acked"]:
            key = (cg, (bgroup or r.get("bgroup", ""), topic, int(queue), int(offset)))
            if key not in self.acks or when < self.acks[key]:
                self.acks[key] = when

    def _fault(self, r: Record, session: int) -> None:
        fid = int(r["fault_id"])
        if r.get("phase") == "start":
            self.faults[(session, fid)] = FaultWindow(
                fid,
                r["kind"],
                r["time"],
                None,
                list(r.get("targets", [])),
                list(r.get("groups", [])),
                bool(r.get("skipped", False)),
                session,
            )
        elif r.get("phase") == "end" and (session, fid) in self.faults:
            self.faults[(session, fid)].end = r["time"]
            if not self.faults[(session, fid)].skipped:
                self._ended_since_health.append((session, fid))

    def fault_windows(self) -> list[FaultWindow]:
        return sorted(self.faults.values(), key=lambda f: (f.session, f.start))


def collect_sends(records: Iterable[Record]) -> dict[str, SendOp]:
    return Collector().add_all(records).sends


def collect_deliveries(records: Iterable[Record]) -> list[Delivery]:
    return Collector().add_all(records).deliveries


def collect_faults(records: Iterable[Record]) -> list[FaultWindow]:
    return Collector().add_all(records).fault_windows()


def collect_drains(records: Iterable[Record]) -> list[Record]:
    """The drain checks run after each episode (drain.py), in order."""
    return Collector().add_all(records).drains


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


def delivered_after_ack(
    acks: dict[tuple[str, Position], When], deliveries: Sequence[Delivery]
) -> list[dict[str, Any]]:
    """Deliveries of a position to a consumer group by a receive invoked after that
    group's ack of the position had succeeded, in (session, time) order. A receive
    without a recorded invoke is not judged (it cannot be placed)."""
    out: list[dict[str, Any]] = []
    for d in deliveries:
        if d.invoked is None or not d.cg:
            continue
        acked = acks.get((d.cg, d.position))
        if acked is not None and (d.session, d.invoked) > acked:
            out.append(
                {
                    "cg": d.cg,
                    "id": d.id,
                    "position": list(d.position),
                    "acked_at": list(acked),
                    "receive_invoked_at": [d.session, d.invoked],
                    "delivered_at": [d.session, d.time],
                }
            )
    return out


def after_ack_summary(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_group: dict[str, int] = defaultdict(int)
    for item in found:
        by_group[item["cg"]] += 1
    return {
        "count": len(found),
        "by_group": dict(sorted(by_group.items())),
        "sample": found[:SAMPLE],
    }


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
        g: [o.id for o in sorted(ops, key=lambda o: (o.session, o.seq, o.invoke_time))]
        for g, ops in per_group.items()
    }


def fifo_violations(
    sends: dict[str, SendOp], deliveries: Sequence[Delivery], missing: set[str] | None = None
) -> list[dict[str, Any]]:
    """Per message group, the acknowledged order must be a subsequence of the stored
    order (every delivered position, ordered by queue offset). Lost ids are left out
    here: they are reported as lost."""
    if missing is None:
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
    sends: dict[str, SendOp], deliveries: Sequence[Delivery], missing: set[str] | None = None
) -> list[dict[str, Any]]:
    """Per message group, a FIFO consumer group (lean or official) must first see
    acknowledged messages in the order they were acknowledged (redeliveries of
    earlier ones are fine). Deliveries are ordered by (session, time)."""
    if missing is None:
        missing = set(lost(sends, deliveries))
    first_seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for d in sorted(deliveries, key=lambda d: (d.session, d.time)):
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


def pause_windows(drains: Iterable[Record]) -> dict[int, list[tuple[float, float]]]:
    """Per session, the (start, end) times the runner held the producers for a drain
    check (``paused_s`` before the drain note; histories written before it was
    recorded have none)."""
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for d in drains:
        if d.get("paused_s") is not None:
            end = float(d["time"])
            out[int(d.get("session", 0))].append((end - float(d["paused_s"]), end))
    return out


def held(windows: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] inside the windows (which do not overlap)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


class SendIndex:
    """The completed sends of one session sorted by invoke time, and per producer its
    successful ones, so each fault's recovery is a few binary searches and short
    forward scans rather than a pass over every send.

    ``paused``: when the runner held the producers (drain checks). A producer that
    failed just before a drain check cannot succeed until it ends; that time is the
    runner's, not the cluster's, and is left out of every recovery figure."""

    def __init__(self, sends: Iterable[SendOp], paused: Sequence[tuple[float, float]] = ()) -> None:
        self.paused = sorted(paused)
        self.ops = sorted(
            (s for s in sends if s.complete_time is not None), key=lambda s: s.invoke_time
        )
        self.invokes = [s.invoke_time for s in self.ops]
        self.max_latency = max(
            (s.complete_time - s.invoke_time for s in self.ops if s.complete_time is not None),
            default=0.0,
        )
        self.oks: dict[str | int | None, list[SendOp]] = defaultdict(list)
        for s in self.ops:
            if s.outcome == OK:
                self.oks[s.worker or s.process].append(s)
        self.ok_invokes = {who: [s.invoke_time for s in ops] for who, ops in self.oks.items()}

    @staticmethod
    def _first_ok_after(
        ops: Sequence[SendOp], invokes: Sequence[float], after: float, groups: set[str]
    ) -> float | None:
        """The earliest completion of a successful send invoked at or after ``after``
        in the groups (every send's completion is after its invoke, so the scan stops
        once invokes pass the best completion found)."""
        best: float | None = None
        for i in range(bisect.bisect_left(invokes, after), len(ops)):
            s = ops[i]
            if best is not None and s.invoke_time > best:
                break
            if s.outcome != OK or s.complete_time is None or not _in(s, groups):
                continue
            if best is None or s.complete_time < best:
                best = s.complete_time
        return best

    def recovery(self, fault: FaultWindow) -> dict[str, Any]:
        end = fault.end if fault.end is not None else math.inf
        groups = set(fault.groups)
        lo = bisect.bisect_left(self.invokes, fault.start - self.max_latency)
        hi = bisect.bisect_right(self.invokes, end)
        errors = [
            s
            for s in self.ops[lo:hi]
            if s.outcome in (FAIL, INFO)
            and s.complete_time is not None
            and s.complete_time >= fault.start
            and _in(s, groups)
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
            first = self._first_ok_after(self.ops, self.invokes, began, groups)
            out["recovery_s"] = self._active(began, first)
            healthy = self._every_process_recovered(errors, groups)
            out["all_recovered_s"] = self._active(began, healthy)
        if fault.end is not None:
            after = self._first_ok_after(self.ops, self.invokes, fault.end, groups)
            out["after_heal_s"] = self._active(fault.end, after)
        return out

    def _active(self, start: float, end: float | None) -> float | None:
        """Seconds from ``start`` to ``end`` the producers were free to send (None
        when ``end`` is)."""
        if end is None:
            return None
        return round(max(0.0, end - start - held(self.paused, start, end)), 3)

    def _every_process_recovered(self, errors: Sequence[SendOp], groups: set[str]) -> float | None:
        """When the last producer that failed had a send invoked after its own last
        failure succeed (None if one never did). A producer is its worker (its process
        in histories written before workers were recorded)."""
        last_failure: dict[str | int | None, float] = {}
        for s in errors:
            who = s.worker or s.process
            last_failure[who] = max(last_failure.get(who, s.invoke_time), s.invoke_time)
        healthy = 0.0
        for who, failed_at in last_failure.items():
            ok = self._first_ok_after(
                self.oks.get(who, []), self.ok_invokes.get(who, []), failed_at, groups
            )
            if ok is None:
                return None
            healthy = max(healthy, ok)
        return healthy


def _in(s: SendOp, groups: set[str]) -> bool:
    return not groups or s.bgroup is None or s.bgroup in groups


def fault_recovery(sends: Iterable[SendOp], fault: FaultWindow) -> dict[str, Any]:
    """Client-seen recovery for one fault, over the sends of its session and of the
    broker groups it hit (all of them when it hit the controllers or everything).

    ``recovery_s``: from the first failed/indeterminate send inside the window (its
    invoke, or the fault start if it was invoked before) to the completion of the next
    successful send invoked after it; 0 when no send failed; None when none succeeded
    afterwards. ``after_heal_s``: from the heal to the completion of the first
    successful send invoked after it. ``last_error_s``: from the fault start to the
    last failure it caused (how long some clients still saw errors).
    ``all_recovered_s``, the strict figure: from that first failure until every
    producer process that failed had a send succeed after its own last failure
    (None when one never did) — one healthy producer is not a healthy cluster."""
    return SendIndex(s for s in sends if s.session == fault.session).recovery(fault)


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
        cluster = [f["whole_s"] for f in items if f.get("whole_s") is not None]
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
            "all_recovered_max_s": max(whole) if whole else None,
            "not_all_recovered": sum(1 for f in items if f["all_recovered_s"] is None),
            # The cluster's own recovery (ClusterProbe.health), after the last heal of
            # the fault's episode: for faults clients do not see (the operator's), the
            # one that tells.
            "whole_p50_s": percentile(cluster, 50),
            "whole_p99_s": percentile(cluster, 99),
            "whole_max_s": max(cluster) if cluster else None,
        }
    return out


# -- the summary ------------------------------------------------------------------------


def _sample(ids: Sequence[str]) -> dict[str, Any]:
    return {"count": len(ids), "sample": list(ids[:SAMPLE])}


def check(records: Iterable[Record]) -> dict[str, Any]:
    """Every verdict over one history (any iterable of records: one pass); ``valid``
    is False when anything that must be empty is not."""
    collected = Collector().add_all(records)
    sends, deliveries = collected.sends, collected.deliveries
    faults = collected.fault_windows()
    outcome_counts: dict[str, int] = defaultdict(int)
    for op in sends.values():
        outcome_counts[op.outcome or "pending"] += 1
    lost_ids = lost(sends, deliveries)
    missing = set(lost_ids)
    unexpected_ids = unexpected(sends, deliveries)
    fifo = fifo_violations(sends, deliveries, missing)
    consumer_fifo = consumer_fifo_violations(sends, deliveries, missing)
    inconsistent = inconsistent_offsets(sends, deliveries)
    after_ack = delivered_after_ack(collected.acks, deliveries)
    dupes = duplicates(deliveries)
    by_session: dict[int, list[SendOp]] = defaultdict(list)
    for op in sends.values():
        by_session[op.session].append(op)
    indexes: dict[int, SendIndex] = {}
    paused = pause_windows(collected.drains)
    fault_rows = []
    for f in faults:
        row: dict[str, Any] = {
            "id": f.fault_id,
            "kind": f.kind,
            "session": f.session,
            "start": f.start,
            "end": f.end,
            "targets": f.targets,
            "groups": f.groups,
            "skipped": f.skipped,
            "whole_s": f.whole_s,
        }
        if not f.skipped:
            if f.session not in indexes:
                indexes[f.session] = SendIndex(
                    by_session.get(f.session, []), paused.get(f.session, [])
                )
            row.update(indexes[f.session].recovery(f))
        fault_rows.append(row)
    by_kind_count: dict[str, int] = defaultdict(int)
    skipped: dict[str, int] = defaultdict(int)
    for f in faults:
        (skipped if f.skipped else by_kind_count)[f.kind] += 1
    missed = consumer_missed(sends, deliveries)
    drains = drain_summary(collected.drains)
    valid = not (
        lost_ids
        or unexpected_ids
        or fifo
        or consumer_fifo
        or inconsistent
        or after_ack
        or drains["stalls"]
    )
    return {
        "valid": valid,
        "sessions": len(collected.sessions),
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
        "delivered_after_ack": after_ack_summary(after_ack),
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
