"""What faults to run, and when.

An episode is one or more faults with start offsets inside it, then a quiet gap
after everything healed and the cluster is whole again (the runner waits for that,
so episodes never pile up on a cluster that has not recovered). The fixed set is
every fault kind once, short enough for ``make test``; the soak is an endless,
seeded stream of episodes — random kinds, targets, durations, and sometimes a
second fault overlapping the first — so a seed replays the same schedule (the
processes holding each role are found at run time).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from rocketcluster.ctl.chaos.faults import FaultKind, FaultSpec, Target, spec


@dataclass(frozen=True)
class Timed:
    offset: float  # seconds after the episode began
    fault: FaultSpec


@dataclass(frozen=True)
class Episode:
    faults: tuple[Timed, ...]
    gap: float  # quiet seconds after the cluster is whole again

    @property
    def length(self) -> float:
        return max((t.offset + t.fault.duration for t in self.faults), default=0.0)

    def describe(self) -> str:
        return " + ".join(
            (f"@{t.offset:g}s " if t.offset else "") + t.fault.describe() for t in self.faults
        )


def _single(fault: FaultSpec, gap: float = 2.0) -> Episode:
    return Episode((Timed(0.0, fault),), gap)


def fixed() -> list[Episode]:
    """Every fault kind once (about 3-4 minutes on the 2-core machine with recovery)."""
    k = FaultKind
    return [
        _single(spec(k.KILL, 8)),
        _single(spec(k.PAUSE, 8)),
        _single(spec(k.PARTITION, 10)),
        _single(spec(k.MASTER_FROM_CONTROLLERS, 10)),
        _single(spec(k.LEADER_PARTITION, 8)),
        _single(spec(k.ONEWAY_OUTBOUND, 8, Target.MASTER)),
        _single(spec(k.ONEWAY_INBOUND, 8, Target.LEADER)),
        _single(spec(k.PACKET_LOSS, 10, probability=0.1)),
        _single(spec(k.KILL_CONTROLLER_MAJORITY, 8)),
        # A slave falls behind (paused, still in sync), and while it is frozen the
        # master and the other slave die: the laggard, alone when it wakes up, must
        # not become master and drop what the two had acknowledged.
        Episode(
            (Timed(0.0, spec(k.PAUSE, 4, Target.SLAVE)), Timed(2.0, spec(k.KILL_TWO_REPLICAS, 8))),
            2.0,
        ),
        _single(spec(k.KILL, 6, Target.LEADER)),
        # A front process of the master dies under load: its clients reconnect to the
        # other front at once, the broker starts it again.
        _single(spec(k.KILL_FRONT, 4)),
    ]


# What a soak draws from: (kind, targets it may hit, weight).
SOAK_KINDS: tuple[tuple[FaultKind, tuple[Target, ...], int], ...] = (
    (FaultKind.KILL, (Target.MASTER, Target.MASTER, Target.SLAVE, Target.LEADER), 4),
    (FaultKind.PAUSE, (Target.MASTER, Target.SLAVE, Target.LEADER), 3),
    (FaultKind.PARTITION, (Target.MASTER, Target.SLAVE, Target.FOLLOWER), 3),
    (FaultKind.MASTER_FROM_CONTROLLERS, (Target.MASTER,), 2),
    (FaultKind.LEADER_PARTITION, (Target.LEADER,), 2),
    (FaultKind.ONEWAY_INBOUND, (Target.MASTER, Target.LEADER, Target.SLAVE), 2),
    (FaultKind.ONEWAY_OUTBOUND, (Target.MASTER, Target.LEADER, Target.SLAVE), 2),
    (FaultKind.PACKET_LOSS, (Target.ALL, Target.MASTER, Target.LEADER), 2),
    (FaultKind.KILL_CONTROLLER_MAJORITY, (Target.LEADER,), 1),
    (FaultKind.KILL_TWO_REPLICAS, (Target.MASTER,), 1),
    (FaultKind.KILL_FRONT, (Target.MASTER, Target.SLAVE), 2),
)
# Faults that may overlap a first one (a composite): they hit other processes.
SECOND_KINDS = (
    FaultKind.PACKET_LOSS,
    FaultKind.PAUSE,
    FaultKind.KILL,
    FaultKind.PARTITION,
    FaultKind.KILL_FRONT,
)


def _draw(rng: random.Random, groups: int, kinds: tuple[FaultKind, ...]) -> FaultSpec:
    table = [row for row in SOAK_KINDS if row[0] in kinds]
    kind, targets, _ = rng.choices(table, weights=[row[2] for row in table])[0]
    target = rng.choice(targets)
    duration = round(rng.uniform(4.0, 20.0), 1)
    probability = round(rng.uniform(0.03, 0.2), 3)
    return FaultSpec(kind, duration, target, rng.randrange(groups), probability)


def soak(seed: int, *, groups: int = 2) -> Iterator[Episode]:
    """Endless seeded episodes: a fault, sometimes with a second one overlapping it.
    Network faults are drawn even where they cannot run (the runner shows them as
    SKIPPED), so a seed means one schedule everywhere."""
    rng = random.Random(seed)
    every = tuple(row[0] for row in SOAK_KINDS)
    while True:
        first = _draw(rng, groups, every)
        faults = [Timed(0.0, first)]
        if rng.random() < 0.3:
            second = _draw(rng, groups, SECOND_KINDS)
            offset = round(rng.uniform(0.0, first.duration / 2), 1)
            faults.append(Timed(offset, second))
        yield Episode(tuple(faults), round(rng.uniform(2.0, 12.0), 1))


def take(episodes: Iterator[Episode], count: int) -> list[Episode]:
    return [next(episodes) for _ in range(count)]
