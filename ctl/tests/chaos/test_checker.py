"""The checker on hand-made histories: every verdict, including the ones that must
fail the run."""

from __future__ import annotations

import random
from typing import Any

from rocketcluster.ctl.chaos.checker import (
    FaultWindow,
    SendOp,
    check,
    collect_deliveries,
    collect_faults,
    collect_sends,
    consumer_fifo_violations,
    duplicates,
    fault_recovery,
    fifo_violations,
    held,
    inconsistent_offsets,
    lost,
    percentile,
    recovered,
    redeliveries,
    unexpected,
)
from rocketcluster.ctl.chaos.history import History, iter_history_file, last_session, read_history
from rocketcluster.ctl.chaos.workload import SESSION_PROCESSES, Workload, WorkloadConfig

Record = dict[str, Any]
BG = "g-0"


class H:
    """A tiny history builder: times advance by 0.1 s per record unless given."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.t = 0.0

    def _add(self, kind: str, f: str, at: float | None, **fields: Any) -> None:
        self.t = at if at is not None else self.t + 0.1
        self.records.append({"type": kind, "f": f, "time": round(self.t, 3), **fields})

    def send(
        self,
        mid: str,
        outcome: str = "ok",
        *,
        offset: int | None = None,
        mgroup: str = "",
        seq: int = 0,
        at: float | None = None,
        took: float = 0.01,
        bgroup: str = BG,
        process: int = 1,
    ) -> H:
        common: dict[str, Any] = {
            "id": mid,
            "topic": "t",
            "bgroup": bgroup,
            "seq": seq,
            "worker": f"w{process}",
        }
        if mgroup:
            common["mgroup"] = mgroup
        self._add("invoke", "send", at, process=process, **common)
        extra = {"offset": offset} if outcome == "ok" and offset is not None else {}
        self._add(outcome, "send", self.t + took, process=process, **common, **extra)
        return self

    def deliver(
        self,
        mid: str,
        offset: int,
        *,
        queue: int = 0,
        mgroup: str = "",
        source: str = "receive",
        cg: str = "cg",
        at: float | None = None,
    ) -> H:
        self._add(
            "ok",
            source,
            at,
            process=2,
            id=mid,
            topic="t",
            bgroup=BG,
            queue=queue,
            offset=offset,
            mgroup=mgroup,
            cg=cg,
        )
        return self

    def fault(self, fid: int, kind: str, start: float, end: float, groups: list[str]) -> H:
        self.records.append(
            {
                "type": "info",
                "f": "fault",
                "time": start,
                "phase": "start",
                "fault_id": fid,
                "kind": kind,
                "groups": groups,
            }
        )
        self.records.append(
            {
                "type": "info",
                "f": "fault",
                "time": end,
                "phase": "end",
                "fault_id": fid,
                "kind": kind,
            }
        )
        return self


def verdicts(h: H) -> dict[str, Any]:
    return check(h.records)


def test_a_clean_history_is_valid() -> None:
    h = H().send("a", offset=0).send("b", offset=1).deliver("a", 0).deliver("b", 1)
    s = verdicts(h)
    assert s["valid"]
    assert s["lost"]["count"] == s["unexpected"]["count"] == 0
    assert s["sends"] == {"invoked": 2, "ok": 2}


def test_an_acknowledged_message_never_delivered_is_lost() -> None:
    h = H().send("a", offset=0).send("b", offset=1).deliver("a", 0)
    s = verdicts(h)
    assert not s["valid"]
    assert s["lost"] == {"count": 1, "sample": ["b"]}


def test_indeterminate_and_failed_sends_are_not_lost() -> None:
    h = H().send("a", "info").send("b", "fail")
    sends, deliveries = collect_sends(h.records), collect_deliveries(h.records)
    assert lost(sends, deliveries) == []
    assert check(h.records)["valid"]


def test_an_indeterminate_send_that_shows_up_is_recovered() -> None:
    h = H().send("a", "info").deliver("a", 0, source="audit")
    s = verdicts(h)
    assert s["valid"] and s["recovered"] == {"count": 1, "sample": ["a"]}
    assert recovered(collect_sends(h.records), collect_deliveries(h.records)) == ["a"]


def test_a_send_without_completion_counts_as_indeterminate() -> None:
    h = H()
    h.records.append({"type": "invoke", "f": "send", "time": 1.0, "id": "a", "topic": "t"})
    h.deliver("a", 0)
    s = verdicts(h)
    assert s["valid"] and s["recovered"]["count"] == 1 and s["sends"]["pending"] == 1


def test_unexpected_deliveries_fail_the_run() -> None:
    never_sent = H().send("a", offset=0).deliver("a", 0).deliver("ghost", 1)
    assert verdicts(never_sent)["unexpected"]["sample"] == ["ghost"]
    assert not verdicts(never_sent)["valid"]
    failed_but_there = H().send("a", "fail").deliver("a", 0)
    sends = collect_sends(failed_but_there.records)
    assert unexpected(sends, collect_deliveries(failed_but_there.records)) == ["a"]
    assert not verdicts(failed_but_there)["valid"]


def test_duplicates_and_redeliveries_are_counted_not_failed() -> None:
    h = (
        H()
        .send("a", offset=0)
        .deliver("a", 0)
        .deliver("a", 0)  # redelivered: same position
        .deliver("a", 5)  # stored twice
        .deliver("a", 0, source="audit", cg="audit")
    )
    deliveries = collect_deliveries(h.records)
    assert duplicates(deliveries) == {"a": [(BG, "t", 0, 0), (BG, "t", 0, 5)]}
    assert redeliveries(deliveries) == 1
    s = verdicts(h)
    assert s["valid"] and s["duplicates"]["count"] == 1 and s["redeliveries"] == 1


def test_two_ids_at_one_position_are_inconsistent() -> None:
    h = H().send("a", offset=0).send("b", offset=0).deliver("a", 0).deliver("b", 0)
    problems = inconsistent_offsets(collect_sends(h.records), collect_deliveries(h.records))
    assert {"position": [BG, "t", 0, 0], "ids": ["a", "b"]} in problems
    assert not verdicts(h)["valid"]


def test_an_acknowledged_offset_where_the_message_is_not_is_inconsistent() -> None:
    h = H().send("a", offset=3).deliver("a", 4)
    problems = inconsistent_offsets(collect_sends(h.records), collect_deliveries(h.records))
    assert problems == [{"id": "a", "acknowledged": [BG, 3], "delivered": [[BG, 4]]}]
    assert not verdicts(h)["valid"]
    other_group = H().send("a", offset=3).deliver("a", 3)
    other_group.records[1]["bgroup"] = "g-1"  # acknowledged by another group's queue
    assert inconsistent_offsets(
        collect_sends(other_group.records), collect_deliveries(other_group.records)
    )


def _fifo(order: list[tuple[str, int]], acked: list[str]) -> H:
    h = H()
    for i, mid in enumerate(acked):
        h.send(mid, mgroup="m", seq=i, offset=None)
    for mid, offset in order:
        h.deliver(mid, offset, mgroup="m", source="audit", cg="audit")
    return h


def test_fifo_holds_when_acknowledged_order_is_a_subsequence_of_the_stored_order() -> None:
    h = _fifo([("a", 0), ("x", 1), ("b", 2), ("a", 3), ("c", 4)], ["a", "b", "c"])
    h.send("x", "info", mgroup="m", seq=99)  # x: indeterminate, stored in between
    assert fifo_violations(collect_sends(h.records), collect_deliveries(h.records)) == []
    assert verdicts(h)["valid"]


def test_fifo_breaks_when_the_stored_order_differs() -> None:
    h = _fifo([("a", 0), ("c", 1), ("b", 2)], ["a", "b", "c"])
    problems = fifo_violations(collect_sends(h.records), collect_deliveries(h.records))
    assert problems and problems[0]["mgroup"] == "m" and problems[0]["out_of_order"] == "c"
    s = verdicts(h)
    assert not s["valid"] and s["fifo"]["violation_count"] == 1


def test_fifo_breaks_when_a_message_group_spans_queues() -> None:
    h = H().send("a", mgroup="m", seq=0).send("b", mgroup="m", seq=1)
    h.deliver("a", 0, queue=0, mgroup="m").deliver("b", 0, queue=1, mgroup="m")
    problems = fifo_violations(collect_sends(h.records), collect_deliveries(h.records))
    assert problems[0]["problem"] == "stored in several queues"


def test_a_lost_fifo_message_is_reported_as_lost_not_as_disorder() -> None:
    h = _fifo([("a", 0), ("c", 1)], ["a", "b", "c"])
    s = verdicts(h)
    assert s["lost"]["sample"] == ["b"] and s["fifo"]["violation_count"] == 0


def test_a_fifo_consumer_must_first_see_messages_in_acknowledged_order() -> None:
    good = H().send("a", mgroup="m", seq=0).send("b", mgroup="m", seq=1)
    good.deliver("a", 0, mgroup="m").deliver("b", 1, mgroup="m").deliver("a", 0, mgroup="m")
    assert (
        consumer_fifo_violations(collect_sends(good.records), collect_deliveries(good.records))
        == []
    )
    bad = H().send("a", mgroup="m", seq=0).send("b", mgroup="m", seq=1)
    bad.deliver("b", 1, mgroup="m").deliver("a", 0, mgroup="m")
    problems = consumer_fifo_violations(collect_sends(bad.records), collect_deliveries(bad.records))
    assert problems and problems[0]["out_of_order"] == "b"
    assert not verdicts(bad)["valid"]


def test_recovery_from_first_error_to_next_success_and_after_heal() -> None:
    h = H()
    h.fault(1, "kill", start=10.0, end=20.0, groups=[BG])
    h.send("ok-before", at=9.0)
    h.send("e1", "info", at=10.5, took=3.0)  # fails at 13.5
    h.send("e2", "info", at=11.0, took=3.0)
    h.send("other-group", at=11.5, bgroup="g-1")  # another group's success does not count
    h.send("first-ok", at=14.0, took=0.2)  # completes at 14.2
    h.send("after-heal", at=20.5, took=0.1)
    [fault] = collect_faults(h.records)
    result = fault_recovery(collect_sends(h.records).values(), fault)
    assert result["errors"] == 2
    assert result["recovery_s"] == 3.7  # 10.5 -> 14.2
    assert result["after_heal_s"] == 0.6  # 20.0 -> 20.6
    assert result["last_error_s"] == 4.0  # e2 failed at 14.0
    summary = check(h.records)
    assert summary["recovery_by_kind"]["kill"]["recovery_p50_s"] == 3.7


def test_every_producer_must_recover_for_the_strict_figure() -> None:
    """One producer back is not the cluster back: the strict figure waits for every
    producer that failed to succeed after its own last failure."""
    h = H()
    h.fault(1, "kill", start=10.0, end=20.0, groups=[BG])
    h.send("p1-fails", "info", at=10.5, took=1.0, process=1)
    h.send("p2-fails", "fail", at=10.6, took=1.0, process=2)
    h.send("p1-ok", at=12.0, took=0.1, process=1)  # the cluster looks back at 12.1
    h.send("p2-fails-again", "info", at=12.5, took=2.0, process=2)
    h.send("p2-ok", at=15.0, took=0.5, process=2)  # producer 2 only at 15.5
    [fault] = collect_faults(h.records)
    result = fault_recovery(collect_sends(h.records).values(), fault)
    assert result["recovery_s"] == 1.6  # 10.5 -> 12.1
    assert result["all_recovered_s"] == 5.0  # 10.5 -> 15.5
    row = check(h.records)["recovery_by_kind"]["kill"]
    assert row["all_recovered_p50_s"] == 5.0 and row["not_all_recovered"] == 0
    stuck = H().fault(1, "kill", start=1.0, end=10.0, groups=[BG])
    stuck.send("a", "info", at=1.5, process=1).send("b", at=2.0, process=1)
    stuck.send("c", "fail", at=2.5, process=2)  # producer 2 never succeeds again
    [fault] = collect_faults(stuck.records)
    result = fault_recovery(collect_sends(stuck.records).values(), fault)
    assert result["recovery_s"] is not None and result["all_recovered_s"] is None
    assert check(stuck.records)["recovery_by_kind"]["kill"]["not_all_recovered"] == 1


def test_no_errors_means_no_recovery_time_and_never_recovering_is_none() -> None:
    calm = H().fault(1, "pause", 1.0, 2.0, []).send("a", at=1.5)
    [fault] = collect_faults(calm.records)
    assert fault_recovery(collect_sends(calm.records).values(), fault)["recovery_s"] == 0.0
    stuck = H().fault(1, "pause", 1.0, 2.0, []).send("a", "info", at=1.5)
    [fault] = collect_faults(stuck.records)
    assert fault_recovery(collect_sends(stuck.records).values(), fault)["recovery_s"] is None
    assert check(stuck.records)["recovery_by_kind"]["pause"]["never_recovered"] == 1


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_history_round_trips_through_jsonl(tmp_path: Any) -> None:
    path = tmp_path / "h.jsonl"
    history = History(path)
    history.append("invoke", "send", process=1, id="a", topic="t")
    history.append("ok", "send", process=1, id="a", topic="t", offset=0, kind="not-a-clash")
    history.close()
    records = read_history(path)
    assert [r["type"] for r in records] == ["info", "invoke", "ok"]
    assert records[2]["kind"] == "not-a-clash"
    assert records[1]["time"] <= records[2]["time"]


def _drain_note(h: H, complete: bool, seconds: float, **extra: Any) -> H:
    h.records.append(
        {
            "type": "info",
            "f": "note",
            "time": h.t,
            "event": "drain",
            "episode": "kill master g-0",
            "complete": complete,
            "seconds": seconds,
            **extra,
        }
    )
    return h


def _health_note(h: H, healthy: bool, seconds: float, why: str = "episode") -> H:
    h.records.append(
        {
            "type": "info",
            "f": "note",
            "time": h.t,
            "event": "health",
            "why": why,
            "healthy": healthy,
            "seconds": seconds,
        }
    )
    return h


def test_each_fault_gets_the_time_its_episode_took_to_be_whole_again() -> None:
    """Clients do not see an operator killed; how long the cluster was not whole (no
    Lease holder, a stale status) is the figure that tells, per kind."""
    h = H().send("a", offset=0).deliver("a", 0)
    h.fault(1, "kill-operator", 1.0, 4.0, []).fault(2, "kill", 2.0, 5.0, [BG])
    _health_note(h, True, 8.5)
    h.fault(3, "kill-operator", 20.0, 23.0, [])
    _health_note(h, True, 2.5)
    h.fault(4, "kill-operator", 30.0, 33.0, [])
    _health_note(h, False, 60.0)  # never whole within the settle time: no figure
    h.fault(5, "pause", 40.0, 42.0, [])
    _health_note(h, True, 1.0, why="final")  # not an episode's: counts for none
    v = verdicts(h)
    assert [f["whole_s"] for f in v["faults"]] == [8.5, 8.5, 2.5, None, None]
    operator = v["recovery_by_kind"]["kill-operator"]
    assert (operator["whole_p50_s"], operator["whole_p99_s"], operator["whole_max_s"]) == (
        2.5,
        8.5,
        8.5,
    )
    assert v["recovery_by_kind"]["pause"]["whole_p50_s"] is None


def test_drains_after_faults_are_summarised_and_a_stall_fails_the_run() -> None:
    h = H().send("a", offset=0).deliver("a", 0)
    _drain_note(h, True, 0.5)
    _drain_note(h, True, 2.0)
    s = verdicts(h)
    assert s["valid"]
    assert s["drains"]["checks"] == 2 and s["drains"]["stalls"] == 0
    assert s["drains"]["max_s"] == 2.0
    stalled = {
        "bgroup": BG,
        "cg": "cg",
        "topic": "t",
        "queue": 3,
        "committed": 738,
        "target": 755,
        "inflight": 0,
        "ready": 17,
    }
    _drain_note(h, False, 10.2, stalled=[stalled], stalled_queues=1, bound_s=10.0)
    s = verdicts(h)
    assert not s["valid"]
    assert s["drains"]["stalls"] == 1
    assert s["drains"]["stalled"][0]["sample"] == [stalled]
    assert s["drains"]["stalled"][0]["episode"] == "kill master g-0"


# -- the official FIFO consumer, delivered after an ack, sessions ----------------------

OFFICIAL_FIFO_CG = "chaos-official-fifo-cg"


def _receive(
    h: H,
    deliveries: list[tuple[str, int]],
    *,
    process: int,
    cg: str,
    mgroup: str = "",
    invoke_at: float | None = None,
    at: float | None = None,
    session: int | None = None,
) -> H:
    """A receive as the workload writes it: its invoke, then one ok per message."""
    extra = {} if session is None else {"session": session}
    h._add("invoke", "receive", invoke_at, process=process, topic="t", cg=cg, **extra)
    for i, (mid, offset) in enumerate(deliveries):
        h._add(
            "ok",
            "receive",
            at if (at is not None and i == 0) else None,
            process=process,
            id=mid,
            topic="t",
            bgroup=BG,
            queue=0,
            offset=offset,
            mgroup=mgroup,
            cg=cg,
            **extra,
        )
    return h


def _ack(
    h: H,
    acked: list[tuple[str, int]],
    *,
    process: int,
    cg: str,
    at: float | None = None,
    kind: str = "ok",
    session: int | None = None,
) -> H:
    extra = {} if session is None else {"session": session}
    h._add("invoke", "ack", None, process=process, topic="t", cg=cg, **extra)
    h._add(
        kind,
        "ack",
        at,
        process=process,
        topic="t",
        cg=cg,
        count=len(acked),
        acked=[[mid, BG, 0, offset] for mid, offset in acked],
        **extra,
    )
    return h


def test_the_official_fifo_consumer_is_held_to_fifo_order_per_message_group() -> None:
    def history(order: list[tuple[str, int]]) -> H:
        h = H()
        for seq, mid in enumerate(["a", "b", "c"]):
            h.send(mid, offset=seq, mgroup="s0-omg0-0", seq=seq)
        h.send("z", offset=3, mgroup="s0-omg0-1", seq=0)  # another group: its own order
        _receive(h, order, process=7, cg=OFFICIAL_FIFO_CG, mgroup="s0-omg0-0")
        return _receive(h, [("z", 3)], process=7, cg=OFFICIAL_FIFO_CG, mgroup="s0-omg0-1")

    # a redelivery of "a" after "b" is not disorder: first deliveries count
    good = history([("a", 0), ("b", 1), ("a", 0), ("c", 2)])
    s = verdicts(good)
    assert s["valid"] and s["fifo"]["consumer_violation_count"] == 0
    bad = history([("a", 0), ("c", 2), ("b", 1)])
    s = verdicts(bad)
    assert not s["valid"]
    [problem] = s["fifo"]["consumer_violations"]
    assert problem["cg"] == OFFICIAL_FIFO_CG and problem["mgroup"] == "s0-omg0-0"
    assert problem["out_of_order"] == "c"
    assert s["fifo"]["violation_count"] == 0  # stored in order: only the consumer broke it


def test_a_delivery_by_a_receive_invoked_after_a_successful_ack_fails_the_run() -> None:
    h = H().send("a", offset=0).send("b", offset=1)
    _receive(h, [("a", 0), ("b", 1)], process=5, cg="cg", at=1.0)
    _ack(h, [("a", 0)], process=5, cg="cg", at=1.2, kind="fail")  # b's ack failed
    _receive(h, [("b", 1)], process=6, cg="cg", invoke_at=7.0)  # b again: at-least-once
    _ack(h, [("b", 1)], process=6, cg="cg")
    assert verdicts(h)["valid"] and verdicts(h)["delivered_after_ack"]["count"] == 0
    _receive(h, [("a", 0)], process=6, cg="other-cg", invoke_at=9.0)  # another group
    _receive(h, [("a", 0)], process=6, cg="cg", invoke_at=10.0)  # acked at 1.2
    s = verdicts(h)
    assert not s["valid"] and s["lost"]["count"] == 0
    after = s["delivered_after_ack"]
    assert after["count"] == 1 and after["by_group"] == {"cg": 1}
    assert after["sample"][0]["id"] == "a" and after["sample"][0]["acked_at"] == [0, 1.2]
    assert after["sample"][0]["receive_invoked_at"] == [0, 10.0]
    assert s["redeliveries"] == 2  # b and the late a: both still counted as redeliveries


def test_a_receive_in_flight_while_the_ack_completes_is_a_redelivery_not_a_violation() -> None:
    """The ack of "a" (its invisibility expired on the way) succeeds at 8.0 while a
    receive invoked at 7.5 returns "a" again at 8.5: the broker handed it out before
    the ack reached it — at-least-once, counted as a redelivery."""
    h = H().send("a", offset=0)
    _receive(h, [("a", 0)], process=5, cg="cg", invoke_at=1.0)
    h._add("invoke", "receive", 7.5, process=6, topic="t", cg="cg")
    _ack(h, [("a", 0)], process=5, cg="cg", at=8.0)
    h._add(
        "ok", "receive", 8.5, process=6, id="a", topic="t", bgroup=BG, queue=0, offset=0, cg="cg"
    )
    s = verdicts(h)
    assert s["valid"] and s["delivered_after_ack"]["count"] == 0 and s["redeliveries"] == 1


def test_sessions_with_overlapping_clocks_are_ordered_by_session_then_time() -> None:
    """A resumed run's monotonic clock starts again at 0: its records must not be read
    as happening before the first session's."""
    h = H()
    for r in h.records:
        r["session"] = 0
    h.fault(1, "kill", start=10.0, end=20.0, groups=[BG])
    h.send("s0-a", offset=0, mgroup="m", seq=0, at=5.0)
    h.send("s0-b", "info", at=12.0, took=3.0)  # the fault's error; no success follows
    for r in h.records:
        r["session"] = 0
    # session 1: new clock; successes "at 13 s" must not recover session 0's fault
    s1 = H()
    s1.send("s1-c", offset=1, mgroup="m", seq=0, at=13.0)
    s1.send("s1-d", offset=2, at=14.0)
    _ack(s1, [("s0-a", 0)], process=9, cg="cg", at=15.0)
    _receive(s1, [("s1-c", 1), ("s1-d", 2)], process=9, cg="cg", mgroup="m", invoke_at=16.0)
    for r in s1.records:
        r["session"] = 1
    # session 0's first delivery of s0-a, written before session 1, later in time
    _receive(h, [("s0-a", 0)], process=3, cg="cg", mgroup="m", invoke_at=30.0, session=0)
    records = h.records + s1.records
    s = check(records)
    assert s["sessions"] == 2
    [fault] = s["faults"]
    assert fault["session"] == 0 and fault["errors"] == 1
    assert fault["recovery_s"] is None  # no success after it in its own session
    # FIFO: acknowledged order is (session, seq): s0-a then s1-c; first deliveries
    # in (session, time) order: s0-a (session 0, t 30) before s1-c (session 1, t 16)
    assert s["fifo"]["consumer_violation_count"] == 0
    # the ack at session 1 follows the session-0 delivery: nothing after an ack
    assert s["delivered_after_ack"]["count"] == 0
    # s0-a acked in session 0 at t 40, delivered again by a receive invoked in
    # session 1 at t 1: after the ack, although 1 < 40
    _ack(h, [("s0-a", 0)], process=3, cg="cg", at=40.0, session=0)
    late = H()
    _receive(late, [("s0-a", 0)], process=11, cg="cg", mgroup="m", invoke_at=1.0, session=1)
    s = check(h.records + s1.records + late.records)
    assert s["delivered_after_ack"]["count"] == 1
    assert s["delivered_after_ack"]["sample"][0]["acked_at"] == [0, 40.0]


def test_histories_without_session_fields_split_at_each_start_note() -> None:
    """Two old histories concatenated: the second ``start`` note opens session 1."""
    first = [{"type": "info", "f": "note", "time": 0.0, "event": "start"}]
    first += H().fault(1, "pause", 10.0, 12.0, [BG]).send("a", "info", at=10.5).records
    second = [{"type": "info", "f": "note", "time": 0.0, "event": "start"}]
    second += H().send("b", offset=0, at=11.0).deliver("b", 0).records
    s = check(first + second)
    assert s["sessions"] == 2
    assert s["faults"][0]["recovery_s"] is None  # b is in the next session


def _naive_recovery(sends: list[SendOp], fault: FaultWindow) -> dict[str, Any]:
    """The recovery rules written as plain scans over every send (the reference the
    indexed version must agree with)."""
    end = fault.end if fault.end is not None else float("inf")
    groups = set(fault.groups)
    done = [
        (s, s.complete_time)
        for s in sends
        if s.complete_time is not None and (not groups or s.bgroup is None or s.bgroup in groups)
    ]
    errors = [
        (s, t)
        for s, t in done
        if s.outcome in ("fail", "info") and t >= fault.start and s.invoke_time <= end
    ]

    def first_ok(after: float, who: str | None = None) -> float | None:
        oks = [
            t
            for s, t in done
            if s.outcome == "ok" and s.invoke_time >= after and who in (None, s.worker)
        ]
        return min(oks) if oks else None

    out: dict[str, Any] = {"errors": len(errors), "recovery_s": 0.0, "all_recovered_s": 0.0}
    if errors:
        began = max(fault.start, min(s.invoke_time for s, _ in errors))
        first = first_ok(began)
        out["recovery_s"] = None if first is None else round(first - began, 3)
        last: dict[str, float] = {}
        for s, _ in errors:
            last[s.worker] = max(last.get(s.worker, s.invoke_time), s.invoke_time)
        healthy: float | None = 0.0
        for who, failed_at in last.items():
            ok = first_ok(failed_at, who)
            healthy = None if ok is None or healthy is None else max(healthy, ok)
        out["all_recovered_s"] = None if healthy is None else round(healthy - began, 3)
    after = first_ok(fault.end) if fault.end is not None else None
    out["after_heal_s"] = (
        None if after is None or fault.end is None else round(after - fault.end, 3)
    )
    return out


def test_indexed_recovery_agrees_with_plain_scans_on_random_histories() -> None:
    rng = random.Random(32)
    for _ in range(40):
        h = H()
        for i in range(rng.randint(5, 60)):
            h.send(
                f"m{i}",
                rng.choice(["ok", "ok", "ok", "info", "fail"]),
                at=rng.uniform(0, 40),
                took=rng.choice([0.01, 0.2, 3.0, 5.0]),
                bgroup=rng.choice([BG, "g-1"]),
                process=rng.randint(1, 4),
            )
        start = rng.uniform(0, 35)
        h.fault(1, "kill", start=start, end=start + rng.uniform(0.5, 8), groups=[BG])
        [fault] = collect_faults(h.records)
        sends = list(collect_sends(h.records).values())
        got = fault_recovery(sends, fault)
        want = _naive_recovery(sends, fault)
        assert {k: got[k] for k in want} == want


def test_history_sessions_resume_and_a_torn_last_line(tmp_path: Any) -> None:
    path = tmp_path / "h.jsonl"
    first = History(path)
    first.append("invoke", "send", process=1, id="s0-a", topic="t")
    first.close()
    assert last_session(path) == 0
    with path.open("a") as f:  # the process died while writing a record
        f.write('{"type":"ok","f":"send","ti')
    second = History(path, session=1, resume=True, keep=False)
    second.append("ok", "send", process=1_000_001, id="s1-b", topic="t")
    assert second.records() == []  # keep=False: the file is the history
    second.close()
    records = read_history(path)
    assert [(r["session"], r["f"], r.get("event")) for r in records] == [
        (0, "note", "start"),
        (0, "send", None),
        (1, "note", "start"),
        (1, "send", None),
    ]
    assert last_session(path) == 1
    assert check(iter_history_file(path))["sessions"] == 2


def test_the_workload_namespaces_ids_and_processes_by_session() -> None:
    workload = Workload(WorkloadConfig({BG: "127.0.0.1:1"}, session=3), History(None))
    try:
        assert workload.prefix == "s3-"
        assert workload.new_process() == 3 * SESSION_PROCESSES + 1
    finally:
        workload.close()


def test_the_runner_holding_the_producers_is_not_recovery_time() -> None:
    """After the episode the runner holds the producers for the drain check; a
    producer that failed just before cannot succeed until the check ends. That time
    is the runner's: the 80 %-packet-loss soak faults counted it, up to 27 s."""
    h = H()
    h.fault(1, "packet-loss", start=10.0, end=12.0, groups=[BG])
    h.send("e1", "info", at=10.5, took=3.0)  # still in flight when the hold begins
    h.send("ok", at=18.6, took=0.1)  # the first send after the hold: 18.7
    h.t = 18.5
    _drain_note(h, True, 1.0, paused_s=6.0)  # producers held from 12.5 to 18.5
    [row] = check(h.records)["faults"]
    assert row["recovery_s"] == 2.2  # 10.5 -> 18.7 is 8.2 s, 6 of them held
    assert row["all_recovered_s"] == 2.2
    assert row["after_heal_s"] == 0.7  # 12.0 -> 18.7, less the 6 s held
    old = H()  # a history from before the hold was recorded: counted as it was
    old.fault(1, "packet-loss", start=10.0, end=12.0, groups=[BG])
    old.send("e1", "info", at=10.5, took=3.0).send("ok", at=18.6, took=0.1)
    old.t = 18.5
    _drain_note(old, True, 1.0)
    assert check(old.records)["faults"][0]["recovery_s"] == 8.2


def test_held_counts_only_the_overlap() -> None:
    windows = [(2.0, 4.0), (6.0, 7.0)]
    assert held(windows, 0.0, 10.0) == 3.0
    assert held(windows, 3.0, 6.5) == 1.5
    assert held(windows, 4.0, 6.0) == 0.0
    assert held([], 0.0, 5.0) == 0.0
