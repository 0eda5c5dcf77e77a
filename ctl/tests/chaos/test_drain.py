"""The drain check after each fault (chaos/drain.py): its rule on hand-made marks and
positions, and the watch over an admin API that answers from a table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rocketcluster.ctl.chaos.drain import DrainWatch, Mark, Position, behind, stall_report

K0 = ("g-0", "cg", "t", 0)
K1 = ("g-0", "cg", "t", 1)


def test_a_queue_is_behind_until_its_committed_offset_reaches_the_mark() -> None:
    marks = {K0: Mark(target=10, committed=4), K1: Mark(target=5, committed=5)}
    assert behind(marks, {}) == [K0]  # no position yet: where it stood at the mark
    assert behind(marks, {K0: Position(9)}) == [K0]
    assert behind(marks, {K0: Position(10), K1: Position(5)}) == []
    assert behind(marks, {K0: Position(12)}) == []  # the producers went on meanwhile
    report = stall_report(marks, {K0: Position(9, inflight=1)}, [K0])
    assert report == [
        {
            "bgroup": "g-0",
            "cg": "cg",
            "topic": "t",
            "queue": 0,
            "committed": 9,
            "target": 10,
            "inflight": 1,
            "ready": 0,
        }
    ]


class TableProbe:
    """What ClusterProbe answers, from a table the test moves forward: one group,
    its master at admin address "m", one topic of two queues."""

    def __init__(self, committed: list[list[int]]) -> None:
        self.steps = committed  # committed offsets per poll
        self.polls = 0

    def groups(self) -> list[str]:
        return ["g-0"]

    def master(self, group: str) -> dict[str, Any]:
        return {"addresses": {"admin": "m"}}

    def get(self, address: str, path: str) -> Any:
        if path.startswith("/v1/topics/"):
            return {
                "queueOffsets": [{"queueId": q, "minOffset": 0, "maxOffset": 10} for q in (0, 1)]
            }
        step = self.steps[min(self.polls, len(self.steps) - 1)]
        self.polls += 1
        return [
            {"topic": "t", "queueId": q, "committedOffset": c, "inflight": 0, "ready": 10 - c}
            for q, c in enumerate(step)
        ]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_watch_passes_once_the_backlog_is_consumed() -> None:
    clock = Clock()
    probe = TableProbe([[4, 10], [8, 10], [10, 10]])
    watch = DrainWatch(probe, [("cg", "t")], clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    result = watch.wait()
    assert result == {"complete": True, "seconds": 1.0, "backlog": 6, "paused_s": 1.0}


def test_the_hold_counts_the_wait_for_sends_in_flight() -> None:
    """``paused_s`` covers the producers' whole hold: the sends already started
    finishing (here 2 s) and the drain itself; the checker leaves it out of the
    clients' recovery times."""
    clock = Clock()

    @contextlib.contextmanager
    def quiesce() -> Iterator[None]:
        clock.sleep(2.0)  # the last send in flight times out
        yield

    probe = TableProbe([[4, 10], [8, 10], [10, 10]])
    watch = DrainWatch(probe, [("cg", "t")], quiesce=quiesce, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    result = watch.wait()
    assert result["seconds"] == 1.0 and result["paused_s"] == 3.0


def test_the_watch_names_what_stalled_after_the_bound() -> None:
    clock = Clock()
    probe = TableProbe([[4, 10]])
    watch = DrainWatch(probe, [("cg", "t")], bound_s=3.0, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    result = watch.wait()
    assert not result["complete"]
    assert result["seconds"] >= 3.0
    assert result["stalled_queues"] == 1
    assert result["stalled"][0]["queue"] == 0 and result["stalled"][0]["committed"] == 4
    assert result["stalled"][0]["ready"] == 6
