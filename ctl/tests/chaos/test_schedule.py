"""Schedules: a seed is a schedule (replayable), the fixed set covers every kind."""

from __future__ import annotations

from rocketcluster.ctl.chaos.faults import NETWORK_KINDS, FaultKind
from rocketcluster.ctl.chaos.schedule import fixed, soak, take


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert take(soak(42), 50) == take(soak(42), 50)
    assert take(soak(42), 50) != take(soak(43), 50)


def test_soak_draws_every_kind_and_composites() -> None:
    episodes = take(soak(7), 300)
    kinds = {t.fault.kind for e in episodes for t in e.faults}
    assert kinds == set(FaultKind)
    composites = [e for e in episodes if len(e.faults) > 1]
    assert 0.15 < len(composites) / len(episodes) < 0.45
    for e in composites:
        assert e.faults[1].offset <= e.faults[0].fault.duration / 2
    assert all(4.0 <= t.fault.duration <= 20.0 for e in episodes for t in e.faults)
    assert all(0 <= t.fault.group < 2 for e in episodes for t in e.faults)


def test_the_fixed_set_covers_every_kind_once_or_more_and_fits_the_budget() -> None:
    episodes = fixed()
    assert {t.fault.kind for e in episodes for t in e.faults} == set(FaultKind)
    assert set(FaultKind) > NETWORK_KINDS
    assert sum(e.length + e.gap for e in episodes) < 150
    assert fixed() == fixed()
