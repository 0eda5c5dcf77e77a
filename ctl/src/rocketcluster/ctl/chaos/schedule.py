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

import itertools
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
        # An old master whose cut tail holds POP journal records rejoins as a slave under
        # load (seed 3's finding: it rebuilt its consumption state from the whole retained
        # journal in one piece, its loop held up to 33 s, no heartbeat, no replication).
        # It rebuilds from the latest checkpoint in slices; the run fails if a broker's
        # loop is held on CPU past the heartbeat timeout (broker_logs.py).
        _single(spec(k.PARTITION, 8, Target.MASTER, group=1)),
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
        _single(spec(k.KILL_CONTROLLERS, 5)),
        _single(spec(k.PARTITION_HALVES, 6, shuffle=1)),
        _single(spec(k.PARTITION_BRIDGE, 6, shuffle=2)),
        _single(spec(k.PARTITION_RING, 6, shuffle=3)),
        # A slave's disk fills up completely while a master's fsyncs crawl.
        Episode(
            (
                Timed(0.0, spec(k.DISK_FULL, 6, Target.SLAVE, leave_bytes=0)),
                Timed(1.0, spec(k.SLOW_DISK, 5, Target.MASTER, group=1, write_iops=2)),
            ),
            1.0,
        ),
        _single(spec(k.DISK_FULL, 5, Target.MASTER, leave_bytes=64 << 10)),
    ]


# What a soak draws from: (kind, targets it may hit, weight). Every kind of the seeds
# (kills of a minority, a majority and all controllers; pauses; packet loss up to 80 %;
# symmetric, asymmetric, bridge and ring partitions — on brokers, controllers and both)
# and what they do not try: a broker's disk full or slow, a front process killed.
SOAK_KINDS: tuple[tuple[FaultKind, tuple[Target, ...], int], ...] = (
    (
        FaultKind.KILL,
        (Target.MASTER, Target.MASTER, Target.SLAVE, Target.LEADER, Target.FOLLOWER),
        5,
    ),
    (FaultKind.PAUSE, (Target.MASTER, Target.SLAVE, Target.LEADER, Target.FOLLOWER), 4),
    (FaultKind.PARTITION, (Target.MASTER, Target.SLAVE, Target.LEADER, Target.FOLLOWER), 3),
    (FaultKind.MASTER_FROM_CONTROLLERS, (Target.MASTER,), 2),
    (FaultKind.LEADER_PARTITION, (Target.LEADER,), 2),
    (FaultKind.ONEWAY_INBOUND, (Target.MASTER, Target.LEADER, Target.SLAVE), 2),
    (FaultKind.ONEWAY_OUTBOUND, (Target.MASTER, Target.LEADER, Target.SLAVE), 2),
    (FaultKind.PACKET_LOSS, (Target.ALL, Target.MASTER, Target.LEADER, Target.SLAVE), 3),
    (FaultKind.PARTITION_HALVES, (Target.ALL,), 2),
    (FaultKind.PARTITION_BRIDGE, (Target.ALL,), 2),
    (FaultKind.PARTITION_RING, (Target.ALL,), 2),
    (FaultKind.KILL_CONTROLLER_MAJORITY, (Target.LEADER,), 1),
    (FaultKind.KILL_CONTROLLERS, (Target.ALL,), 1),
    (FaultKind.KILL_TWO_REPLICAS, (Target.MASTER,), 1),
    (FaultKind.KILL_FRONT, (Target.MASTER, Target.SLAVE), 2),
    (FaultKind.DISK_FULL, (Target.MASTER, Target.SLAVE, Target.SLAVE), 2),
    (FaultKind.SLOW_DISK, (Target.MASTER, Target.SLAVE), 2),
)
# Faults that may overlap others in one episode: each hits one process or adds loss,
# so two of them meet a cluster already hurt (a broker and a controller at once, or
# two brokers). The cluster-wide partitions and mass kills come alone.
OVERLAPPING = (
    FaultKind.KILL,
    FaultKind.PAUSE,
    FaultKind.PARTITION,
    FaultKind.PACKET_LOSS,
    FaultKind.KILL_FRONT,
    FaultKind.ONEWAY_INBOUND,
    FaultKind.ONEWAY_OUTBOUND,
    FaultKind.MASTER_FROM_CONTROLLERS,
    FaultKind.DISK_FULL,
    FaultKind.SLOW_DISK,
)
# Durations: long enough for a controller to notice (heartbeat timeout ~3 s) and for
# clients to fail over, short enough for a fault every few seconds.
SOAK_DURATION_S = (2.0, 6.0)
SOAK_GAP_S = (0.5, 2.0)


# The soak where the operator runs the cluster through the Kubernetes emulator
# (rocketcluster.e2e.k8s.chaos_pods): the local soak's kills and pauses, now of pods
# that their kubelet restarts, and the operator's own faults — its leading replica
# killed or stalled (the standby must take the Lease), and, every ROLL_EVERY
# episodes, a rolling restart of every pod asked through the manifest with the
# operator killed under it. Network and disk faults need the local soak's namespaces
# and volumes, and run there.
Row = tuple[FaultKind, tuple[Target, ...], int]
OPERATED_KINDS: tuple[Row, ...] = (
    (
        FaultKind.KILL,
        (Target.MASTER, Target.MASTER, Target.SLAVE, Target.LEADER, Target.FOLLOWER),
        5,
    ),
    (FaultKind.PAUSE, (Target.MASTER, Target.SLAVE, Target.LEADER, Target.FOLLOWER), 4),
    (FaultKind.KILL_OPERATOR, (Target.OPERATOR,), 4),
    (FaultKind.PAUSE_OPERATOR, (Target.OPERATOR,), 1),
    (FaultKind.KILL_CONTROLLER_MAJORITY, (Target.LEADER,), 1),
    (FaultKind.KILL_CONTROLLERS, (Target.ALL,), 1),
    (FaultKind.KILL_TWO_REPLICAS, (Target.MASTER,), 1),
    (FaultKind.KILL_FRONT, (Target.MASTER, Target.SLAVE), 2),
)
OPERATED_OVERLAPPING = (
    FaultKind.KILL,
    FaultKind.PAUSE,
    FaultKind.KILL_FRONT,
    FaultKind.KILL_OPERATOR,
    FaultKind.PAUSE_OPERATOR,
)
ROLL_EVERY = 25
# A roll's window: its operator kills fall in it, and its heal (nothing to undo) comes
# at its end, so the report draws it about as long as a roll of nine pods takes here.
ROLL_WINDOW_S = 90.0
# A roll restarts every pod, one at a time, each waiting for its group to be in sync:
# minutes, not the 60 s an episode of faults gets to be whole again.
ROLL_SETTLE_S = 900.0
EPISODE_SETTLE_S = 60.0


def settle_seconds(episode: Episode) -> float:
    """How long the cluster may take to be whole after an episode's last heal."""
    if any(t.fault.kind is FaultKind.ROLL for t in episode.faults):
        return ROLL_SETTLE_S
    return EPISODE_SETTLE_S


def _draw(rng: random.Random, groups: int, table: list[Row] | tuple[Row, ...]) -> FaultSpec:
    kind, targets, _ = rng.choices(table, weights=[row[2] for row in table])[0]
    target = rng.choice(targets)
    duration = round(rng.uniform(*SOAK_DURATION_S), 1)
    probability = rng.choice((0.05, 0.1, 0.2, 0.4, 0.8))
    return FaultSpec(
        kind,
        duration,
        target,
        rng.randrange(groups),
        probability,
        shuffle=rng.randrange(1 << 30),
        # A full disk: nothing left at all, or a little (a segment's worth or less).
        leave_bytes=rng.choice((0, 64 << 10, 4 << 20)),
        write_iops=rng.choice((2, 5, 20)),
    )


def soak(seed: int, *, groups: int = 2) -> Iterator[Episode]:
    """Endless seeded episodes of one to three overlapping faults (of the faults that
    may overlap, four in ten come alone, three in ten with one more, the rest with
    two). Network and disk faults are drawn even where they cannot run (the runner
    shows them as SKIPPED), so a seed means one schedule everywhere."""
    rng = random.Random(seed)
    overlapping = [row for row in SOAK_KINDS if row[0] in OVERLAPPING]
    while True:
        yield _episode(rng, groups, SOAK_KINDS, OVERLAPPING, overlapping)


def _episode(
    rng: random.Random,
    groups: int,
    table: tuple[Row, ...],
    may_overlap: tuple[FaultKind, ...],
    overlapping: list[Row],
) -> Episode:
    first = _draw(rng, groups, table)
    faults = [Timed(0.0, first)]
    if first.kind in may_overlap:
        extra = rng.choices((0, 1, 2), weights=(4, 3, 3))[0]
        for _ in range(extra):
            more = _draw(rng, groups, overlapping)
            faults.append(Timed(round(rng.uniform(0.0, first.duration), 1), more))
    return Episode(tuple(faults), round(rng.uniform(*SOAK_GAP_S), 1))


def operated_soak(seed: int, *, groups: int = 2) -> Iterator[Episode]:
    """Endless seeded episodes for the emulated soak (OPERATED_KINDS, overlapping as
    the local soak's do); every ROLL_EVERY-th is a roll, with the operator's leader
    killed two or three times while it goes on, and maybe a broker as well."""
    rng = random.Random(seed)
    overlapping = [row for row in OPERATED_KINDS if row[0] in OPERATED_OVERLAPPING]
    for number in itertools.count(1):
        if number % ROLL_EVERY:
            yield _episode(rng, groups, OPERATED_KINDS, OPERATED_OVERLAPPING, overlapping)
            continue
        faults = [Timed(0.0, spec(FaultKind.ROLL, ROLL_WINDOW_S))]
        for _ in range(rng.choice((2, 3))):
            kill = spec(FaultKind.KILL_OPERATOR, round(rng.uniform(*SOAK_DURATION_S), 1))
            faults.append(Timed(round(rng.uniform(5.0, ROLL_WINDOW_S - 10), 1), kill))
        if rng.random() < 0.5:
            at = round(rng.uniform(5.0, ROLL_WINDOW_S - 10), 1)
            faults.append(Timed(at, _draw(rng, groups, overlapping)))
        yield Episode(tuple(sorted(faults, key=lambda t: t.offset)), SOAK_GAP_S[1])


def skip(episodes: Iterator[Episode], count: int) -> Iterator[Episode]:
    """The schedule from its ``count``-th episode on: a resumed run goes on where the
    last session stopped (the generator's draws do not depend on what happened)."""
    for _ in range(count):
        next(episodes)
    return episodes


def take(episodes: Iterator[Episode], count: int) -> list[Episode]:
    return [next(episodes) for _ in range(count)]
