"""The checker on hand-made histories: every verdict, including the ones that must
fail the run."""

from __future__ import annotations

from typing import Any

from rocketcluster.ctl.chaos.checker import (
    check,
    collect_deliveries,
    collect_faults,
    collect_sends,
    consumer_fifo_violations,
    duplicates,
    fault_recovery,
    fifo_violations,
    inconsistent_offsets,
    lost,
    percentile,
    recovered,
    redeliveries,
    unexpected,
)
from rocketcluster.ctl.chaos.history import History, read_history

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
