"""RecentIds: the retry-dedupe table remembers at least its capacity of the newest."""

from __future__ import annotations

from rocketcluster.broker.messaging.recent import Landed, RecentIds
from rocketcluster.broker.store.dispatch_batch import LandedRun


def batch(first: int, count: int, topic: str = "t") -> list[LandedRun]:
    """Records ``first`` .. ``first + count - 1``, message i at queue i % 4, offset i
    (one run per record: each follows its queue's previous one)."""
    return [LandedRun(topic, i % 4, i, [f"ID{i}"]) for i in range(first, first + count)]


def test_the_newest_capacity_are_always_remembered() -> None:
    recent = RecentIds(capacity=10)
    for start in range(0, 95, 5):
        recent.record(batch(start, 5))
        newest = start + 4
        for i in range(max(0, newest - 9), newest + 1):  # the last 10, whatever happened
            assert recent.get("t", f"ID{i}") == Landed(i % 4, i)
        assert len(recent) <= 20  # never more than two generations
    assert recent.get("t", "ID0") is None  # long gone
    assert recent.get("other", "ID94") is None  # keyed by topic too


def test_records_without_an_id_are_not_kept() -> None:
    recent = RecentIds(capacity=10)
    recent.record([LandedRun("t", 0, 0, [""])])
    assert len(recent) == 0
