"""Schedules: a seed is a schedule (replayable), the fixed set covers every kind."""

from __future__ import annotations

from collections import Counter

from rocketcluster.ctl.chaos.faults import (
    DISK_KINDS,
    NETWORK_KINDS,
    OPERATOR_KINDS,
    FaultKind,
    Target,
)
from rocketcluster.ctl.chaos.schedule import (
    OVERLAPPING,
    ROLL_EVERY,
    ROLL_SETTLE_S,
    fixed,
    operated_soak,
    settle_seconds,
    skip,
    soak,
    take,
)


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert take(soak(42), 50) == take(soak(42), 50)
    assert take(soak(42), 50) != take(soak(43), 50)


def test_soak_draws_every_kind_and_composites() -> None:
    episodes = take(soak(7), 600)
    kinds = {t.fault.kind for e in episodes for t in e.faults}
    assert kinds == set(FaultKind) - OPERATOR_KINDS
    sizes = Counter(len(e.faults) for e in episodes)
    assert set(sizes) == {1, 2, 3}
    for e in episodes:
        if len(e.faults) > 1:
            assert e.faults[0].fault.kind in OVERLAPPING
            assert all(t.fault.kind in OVERLAPPING for t in e.faults)
            assert all(t.offset <= e.faults[0].fault.duration for t in e.faults)
    assert all(2.0 <= t.fault.duration <= 7.0 for e in episodes for t in e.faults)
    assert all(0 <= t.fault.group < 2 for e in episodes for t in e.faults)
    # Loss as the seeds inject it, up to 80 %.
    losses = {t.fault.probability for e in episodes for t in e.faults}
    assert max(losses) == 0.8


def test_a_fault_every_few_seconds_of_schedule() -> None:
    """The schedule's own share of the cadence (faults' spans and gaps, before any
    recovery wait): well under the 8 s a fault the soak must average."""
    episodes = take(soak(3), 1000)
    faults = sum(len(e.faults) for e in episodes)
    assert sum(e.length + e.gap for e in episodes) / faults < 4.5


def test_a_resumed_schedule_goes_on_where_it_stopped() -> None:
    whole = take(soak(11), 40)
    assert take(skip(soak(11), 25), 15) == whole[25:]


def test_the_fixed_set_covers_every_kind_once_or_more_and_fits_the_budget() -> None:
    episodes = fixed()
    assert {t.fault.kind for e in episodes for t in e.faults} == set(FaultKind) - OPERATOR_KINDS
    assert set(FaultKind) > NETWORK_KINDS
    assert sum(e.length + e.gap for e in episodes) < 200
    assert fixed() == fixed()


def test_the_operated_soak_kills_the_operator_and_rolls_under_it() -> None:
    episodes = take(operated_soak(5), 4 * ROLL_EVERY)
    assert take(operated_soak(5), 60) == episodes[:60]
    assert take(skip(operated_soak(5), 30), 10) == episodes[30:40]
    kinds = {t.fault.kind for e in episodes for t in e.faults}
    # Neither network nor disk faults: the pods share this host's network and disk.
    assert not kinds & (NETWORK_KINDS | DISK_KINDS)
    assert OPERATOR_KINDS | {FaultKind.KILL, FaultKind.PAUSE, FaultKind.KILL_FRONT} <= kinds
    targets = Counter(t.fault.target for e in episodes for t in e.faults)
    assert targets[Target.OPERATOR] >= 10
    rolls = [i for i, e in enumerate(episodes) if e.faults[0].fault.kind is FaultKind.ROLL]
    assert rolls == [ROLL_EVERY * n - 1 for n in (1, 2, 3, 4)]
    for i in rolls:
        roll = episodes[i]
        killed = [t for t in roll.faults if t.fault.kind is FaultKind.KILL_OPERATOR]
        assert 2 <= len(killed) <= 3 and all(5 <= t.offset <= 80 for t in killed)
        assert roll.faults[0].fault.duration == 90.0
        assert settle_seconds(roll) == ROLL_SETTLE_S
    assert settle_seconds(episodes[0]) < ROLL_SETTLE_S
