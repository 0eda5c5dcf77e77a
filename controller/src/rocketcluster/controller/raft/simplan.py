"""What a simulation seed decides, and what a run reports (see sim.py)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

MARKER = b"live-"
"""Prefix of the liveness phase's proposals."""

DEFAULT_STEPS = 600
DEFAULT_LIVENESS_TICKS = 400


@dataclass(frozen=True, slots=True)
class SimOptions:
    steps: int = DEFAULT_STEPS  # ticks of the safety phase
    liveness_ticks: int = DEFAULT_LIVENESS_TICKS  # bound on the liveness phase


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Everything about a run that the seed decides up front."""

    nodes: int
    election_tick: int
    heartbeat_tick: int
    max_inflight: int
    max_size_per_msg: int | None
    max_uncommitted: int
    loss: float
    duplicate: float
    max_delay: int
    partition_rate: float
    one_way_share: float
    heal_rate: float
    crash_rate: float
    leader_crash_rate: float
    max_down_ticks: int
    crash_mid_ready: float
    disk_latency: tuple[int, ...]  # per node: a write takes 0..this many ticks
    tick_rates: tuple[float, ...]
    proposal_rate: float
    transfer_rate: float
    snapshot_interval: int
    snapshot_keep: int
    report_rate: float

    @classmethod
    def draw(cls, rng: random.Random) -> FaultPlan:
        nodes = rng.choice((3, 5))
        return cls(
            nodes=nodes,
            election_tick=10,
            heartbeat_tick=rng.choice((1, 2, 3)),
            max_inflight=rng.choice((1, 2, 4, 256)),
            max_size_per_msg=rng.choice((None, 1, 8, 64)),
            max_uncommitted=rng.choice((8, 32, 64)),
            loss=rng.choice((0.0, 0.02, 0.1, 0.25)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            max_delay=rng.choice((0, 1, 2, 4, 6)),
            partition_rate=rng.choice((0.0, 0.005, 0.02, 0.05)),
            one_way_share=rng.random(),
            heal_rate=rng.uniform(0.02, 0.2),
            crash_rate=rng.choice((0.0, 0.002, 0.01, 0.03)),
            leader_crash_rate=rng.choice((0.0, 0.02, 0.05, 0.1)),
            max_down_ticks=rng.randint(1, 60),
            crash_mid_ready=rng.choice((0.0, 0.001, 0.005)),
            disk_latency=tuple(rng.choice((0, 0, 1, 3, 8)) for _ in range(nodes)),
            tick_rates=tuple(rng.uniform(0.7, 1.0) for _ in range(nodes)),
            proposal_rate=rng.uniform(0.05, 0.6),
            transfer_rate=rng.choice((0.0, 0.005, 0.02)),
            snapshot_interval=rng.randint(2, 30),
            snapshot_keep=rng.randint(0, 5),
            report_rate=rng.random(),
        )


@dataclass(slots=True)
class SimStats:
    seed: int
    nodes: int = 0
    ticks: int = 0
    leaders: int = 0
    committed: int = 0
    proposals: int = 0
    crashes: int = 0
    snapshots_taken: int = 0
    snapshots_installed: int = 0
    transfers: int = 0
    messages: int = 0
    liveness_ticks: int = 0


class SimulationFailure(Exception):
    """A seed broke an invariant (or liveness, or raised). The message replays it."""

    def __init__(self, seed: int, tick: int, phase: str, options: SimOptions, cause: str) -> None:
        self.seed = seed
        self.tick = tick
        self.phase = phase
        self.cause = cause
        self.replay = (
            f"python -m rocketcluster.controller.raft.sim --seeds 1 --start {seed} "
            f"--steps {options.steps} --liveness-ticks {options.liveness_ticks}"
        )
        super().__init__(
            f"seed {seed} failed at tick {tick} ({phase}): {cause} | replay: {self.replay}"
        )


class LivenessFailure(Exception):
    pass


def encode_state(commands: Sequence[bytes]) -> bytes:
    return b"\n".join(commands)


def decode_state(data: bytes) -> list[bytes]:
    return data.split(b"\n") if data else []
