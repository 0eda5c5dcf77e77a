"""Deterministic simulation of a Raft cluster (TigerBeetle style).

One seed drives every random choice: cluster size, fault rates, message fates, crashes,
client load, election jitter. A run has two phases:

1. safety: `steps` ticks under faults (loss, duplication, delay and reordering,
   symmetric and one-way partitions, crashes that lose everything not yet persisted,
   restarts from disk, slow disks, leadership transfers), with every invariant of
   `checker.SafetyChecker` checked after every step;
2. liveness: the network heals and every node restarts; within `liveness_ticks` a leader
   must be elected and a fresh proposal must be applied on every node.

Any failure raises `SimulationFailure` whose message ends with the command replaying it:

    python -m rocketcluster.controller.raft.sim --seeds 1 --start SEED --steps K
"""

from __future__ import annotations

import argparse
import itertools
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rocketcluster.controller.raft.checker import SafetyChecker, invariant
from rocketcluster.controller.raft.config import Config
from rocketcluster.controller.raft.core import Raft
from rocketcluster.controller.raft.errors import (
    NotLeaderError,
    ProposalDroppedError,
)
from rocketcluster.controller.raft.rawnode import RawNode, Ready
from rocketcluster.controller.raft.simnet import LinkFaults, SimNetwork
from rocketcluster.controller.raft.simplan import (
    DEFAULT_LIVENESS_TICKS,
    DEFAULT_STEPS,
    MARKER,
    FaultPlan,
    LivenessFailure,
    SimOptions,
    SimStats,
    SimulationFailure,
    decode_state,
    encode_state,
)
from rocketcluster.controller.raft.storage import MemoryStorage
from rocketcluster.controller.raft.types import (
    MSG_APP,
    MSG_SNAP,
    SNAPSHOT_FAILURE,
    SNAPSHOT_FINISH,
    STATE_LEADER,
    Message,
    ProposalId,
)

__all__ = [
    "FaultPlan",
    "LivenessFailure",
    "SimOptions",
    "SimStats",
    "Simulation",
    "SimulationFailure",
    "main",
    "run_seeds",
]


@dataclass(slots=True)
class _Node:
    """One member: its disk survives crashes; `raw` and `app` do not."""

    id: int
    storage: MemoryStorage
    tick_rate: float
    raw: RawNode | None = None
    core: Raft | None = None  # raw.raft, kept alongside: read on every step
    app: list[bytes] = field(default_factory=list)
    applied: int = 0
    down_until: int = 0
    writing: Ready | None = None  # taken from the node, not yet durable
    write_done_at: int = 0
    leading: bool = False  # last role reported to the checker (it lists it as leader)


class Simulation:
    def __init__(
        self,
        seed: int,
        options: SimOptions | None = None,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.seed = seed
        self.options = options or SimOptions()
        self._trace = trace
        self.rng = random.Random(seed)
        self.plan = FaultPlan.draw(self.rng)
        plan = self.plan
        self.voters = tuple(range(1, plan.nodes + 1))
        self.net = SimNetwork(
            random.Random(self.rng.getrandbits(64)),
            LinkFaults(plan.loss, plan.duplicate, 0, plan.max_delay),
        )
        self.checker = SafetyChecker()
        self.nodes = {i: _Node(i, MemoryStorage(), plan.tick_rates[i - 1]) for i in self.voters}
        self._members = list(self.nodes.values())  # the same order, without a view per loop
        self.now = 0
        self.phase = "safety"
        self.io_healthy = False
        self.crash_mid_ready = plan.crash_mid_ready
        self.stats = SimStats(seed=seed, nodes=plan.nodes)
        self._next_command = 0
        self._leader_hint: int | None = None
        self._markers_seen: dict[int, set[bytes]] = {i: set() for i in self.voters}
        for node in self.nodes.values():
            self._start(node)

    # --- running ----------------------------------------------------------------------

    def run(self) -> SimStats:
        try:
            self._run()
        except Exception as exc:  # a violation, a stall, or any crash of the core
            raise SimulationFailure(
                self.seed, self.now, self.phase, self.options, f"{type(exc).__name__}: {exc}"
            ) from exc
        self.stats.messages = self.net.sent
        self.stats.committed = self.checker.committed_count()
        return self.stats

    def _run(self) -> None:
        for _ in range(self.options.steps):
            self._faults()
            self._client()
            self._tick()
        self._check_all_logs()
        self._liveness()
        self._check_all_logs()

    def _tick(self) -> None:
        self.now += 1
        self.stats.ticks += 1
        rng = self.rng
        members = self._members
        after_step = self._after_step
        for node in members:
            raw = node.raw
            if raw is None:
                continue
            if rng.random() < node.tick_rate:
                raw.tick()
                after_step(node)
        net_due = self.net.due
        deliver = self._deliver
        on_drop = self._on_drop
        now = self.now
        for _ in range(64):
            due = net_due(now, on_drop)
            if not due:
                break
            for m in due:
                deliver(m)
        io = self._io
        for node in members:
            io(node)

    def _deliver(self, m: Message) -> None:
        node = self.nodes[m.to]
        if node.raw is None:
            self._on_drop(m, "down")
            return
        if m.type is MSG_SNAP and self.rng.random() < self.plan.report_rate:
            sender = self.nodes[m.from_id].raw
            if sender is not None:
                sender.report_snapshot(m.to, SNAPSHOT_FINISH)
        node.raw.step(m)
        self._after_step(node)

    def _on_drop(self, m: Message, _reason: str) -> None:
        """A transport that notices a failed send tells the core (sometimes)."""
        if self.rng.random() >= self.plan.report_rate:
            return
        sender = self.nodes[m.from_id]
        if sender.raw is None:
            return
        if m.type is MSG_SNAP:
            sender.raw.report_snapshot(m.to, SNAPSHOT_FAILURE)
        elif m.type is MSG_APP:
            sender.raw.report_unreachable(m.to)
        else:
            return
        self._after_step(sender)

    def _after_step(self, node: _Node) -> None:
        core = node.core
        if core is None:
            return
        if core.state is STATE_LEADER:
            node.leading = True
            self.checker.observe_role(node.id, True, core.term, core.raft_log)
            if self._leader_hint != node.id:
                self._leader_hint = node.id
                self.stats.leaders += 1
                self._log(lambda: f"node {node.id} leads term {core.term}")
        elif node.leading:
            # Only the step down needs telling: for a node the checker does not list as
            # an active leader, observe_role(not leader) does nothing.
            node.leading = False
            self.checker.observe_role(node.id, False, core.term, core.raft_log)
        self._io(node)

    # --- the driver loop of one node: persist, send, apply, advance -------------------

    def _io(self, node: _Node) -> None:
        """Let the node's disk make progress.

        A driver takes a `Ready`, writes it, then sends, applies and advances. A write
        takes 0..disk_latency ticks; meanwhile the node keeps stepping messages (so the
        core must cope with a log that changes between `ready` and `advance`), and a
        crash loses the write.
        """
        raw = node.raw
        if raw is None:
            return
        writing = node.writing
        if writing is not None:
            if self.now < node.write_done_at:
                return
            self._complete_ready(node, writing)
            if node.raw is None:
                return
        if raw.has_ready():
            node.writing = raw.ready()
            latency = 0 if self.io_healthy else self.plan.disk_latency[node.id - 1]
            # randrange(n + 1) draws exactly what randint(0, n) would, one call cheaper.
            node.write_done_at = self.now + (self.rng.randrange(latency + 1) if latency else 0)
            if self.now >= node.write_done_at:
                self._complete_ready(node, node.writing)

    def _flush(self, node: _Node) -> None:
        """Complete every pending write (liveness phase: the disk is healthy)."""
        for _ in range(1000):
            if node.raw is None or (node.writing is None and not node.raw.has_ready()):
                return
            if node.writing is None:
                node.writing = node.raw.ready()
            self._complete_ready(node, node.writing)
        raise LivenessFailure(f"node {node.id} keeps producing Ready batches with no input")

    def _complete_ready(self, node: _Node, rd: Ready) -> None:
        raw = node.raw
        if raw is None:
            return
        node.writing = None
        storage = node.storage
        checker = self.checker
        persisted = storage.hard_state
        if rd.snapshot is not None:
            storage.apply_snapshot(rd.snapshot)
        if rd.entries:
            first = rd.entries[0].index
            if first <= storage.last_index():
                invariant(
                    first > persisted.commit,
                    "committed entries are never overwritten on disk",
                    lambda: f"node {node.id} overwrites from {first}, commit {persisted.commit}",
                )
            storage.append(rd.entries)
            checker.observe_persisted_entries(node.id, rd.entries, storage.term(first - 1))
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        if rd.hard_state is not None or rd.entries or rd.snapshot is not None:
            checker.observe_hard_state(node.id, storage.hard_state, storage.last_index())

        if self.crash_mid_ready and self.rng.random() < self.crash_mid_ready:
            self._crash(node)  # durable, but nothing sent or applied
            return

        if rd.messages:
            now = self.now
            send = self.net.send
            for m in rd.messages:
                send(m, now)

        if rd.snapshot is not None:
            meta = rd.snapshot.metadata
            node.app = decode_state(rd.snapshot.data)
            node.applied = meta.index
            checker.observe_snapshot(node.id, meta.index, node.app)
            self._note_markers(node)
            self.stats.snapshots_installed += 1
        if rd.committed_entries:
            term = raw.term
            app = node.app
            for e in rd.committed_entries:
                checker.observe_apply(node.id, e, term)
                data = e.data
                if data:
                    app.append(data)
                    if data.startswith(MARKER):
                        self._markers_seen[node.id].add(data)
                node.applied = e.index
        raw.advance(rd)
        if node.applied - storage.snapshot().metadata.index >= self.plan.snapshot_interval:
            self._snapshot(node)

    def _snapshot(self, node: _Node) -> None:
        """Snapshot the state machine and compact the log (every `snapshot_interval`)."""
        storage = node.storage
        storage.create_snapshot(node.applied, encode_state(node.app))
        self.stats.snapshots_taken += 1
        compact_to = node.applied - self.plan.snapshot_keep
        if compact_to >= storage.first_index():
            storage.compact(compact_to)

    # --- faults -----------------------------------------------------------------------

    def _faults(self) -> None:
        rng = self.rng
        plan = self.plan
        net = self.net
        if plan.partition_rate and rng.random() < plan.partition_rate:
            if rng.random() < plan.one_way_share:
                src, dst = rng.sample(self.voters, 2)
                net.block_one_way(src, dst)
                self._log(lambda: f"one-way partition {src} -> {dst}")
            else:
                leader = self._leader_hint
                if leader is not None and rng.random() < 0.5:
                    side = [leader]  # isolate the leader: the classic
                else:
                    side = rng.sample(self.voters, rng.randint(1, len(self.voters) - 1))
                net.partition(side, self.voters)
                self._log(lambda: f"partition {sorted(side)} | rest")
        if net.blocked and rng.random() < plan.heal_rate:
            net.heal()
            self._log(lambda: "heal")
        for node in self._members:
            core = node.core
            if core is None:
                if self.now >= node.down_until:
                    self._start(node)
            elif plan.crash_rate and rng.random() < plan.crash_rate:
                self._crash(node)
            elif core.state is STATE_LEADER and rng.random() < plan.leader_crash_rate:
                # Leaders dying with a half-replicated tail is where commit rules break.
                self._crash(node)

    def _crash(self, node: _Node) -> None:
        node.raw = None
        node.core = None
        node.leading = False  # (leader_lost below)
        node.writing = None
        node.app = []
        node.applied = 0
        node.down_until = self.now + self.rng.randint(1, self.plan.max_down_ticks)
        self.checker.leader_lost(node.id)
        if self._leader_hint == node.id:
            self._leader_hint = None
        self.stats.crashes += 1
        self._log(lambda: f"crash node {node.id}")

    def _start(self, node: _Node) -> None:
        plan = self.plan
        rng = random.Random(self.rng.getrandbits(64))
        snapshot = node.storage.snapshot()
        config = Config(
            id=node.id,
            voters=self.voters,
            election_tick=plan.election_tick,
            heartbeat_tick=plan.heartbeat_tick,
            max_inflight_msgs=plan.max_inflight,
            max_size_per_msg=plan.max_size_per_msg,
            max_uncommitted_entries=plan.max_uncommitted,
            # The state machine restarts from the snapshot, which may be newer than the
            # log's compaction point (entries are kept behind it): skip what it holds.
            applied=snapshot.metadata.index,
        )
        node.raw = RawNode(config, node.storage, rng=rng)
        node.core = node.raw.raft
        node.app = decode_state(snapshot.data)
        node.applied = snapshot.metadata.index
        self._markers_seen[node.id] = set()
        if not snapshot.is_empty:
            self.checker.observe_snapshot(node.id, snapshot.metadata.index, node.app)
            self._note_markers(node)
        if self.now:
            self._log(lambda: f"restart node {node.id}")

    def _note_markers(self, node: _Node) -> None:
        self._markers_seen[node.id] = {c for c in node.app if c.startswith(MARKER)}

    # --- clients ----------------------------------------------------------------------

    def _client(self) -> None:
        rng = self.rng
        if rng.random() < self.plan.transfer_rate:
            self._transfer()
        if rng.random() >= self.plan.proposal_rate:
            return
        self._next_command += 1
        self._propose(f"c{self._next_command}".encode())

    def _propose(self, data: bytes) -> ProposalId | None:
        """Propose like a client: try the leader we know of, follow NOT_LEADER once."""
        target = self._leader_hint
        if target is None or self.nodes[target].raw is None:
            live = [n for n in self.nodes.values() if n.raw is not None]
            if not live:
                return None
            target = self.rng.choice(live).id
        for _ in range(2):
            node = self.nodes[target]
            raw = node.raw
            if raw is None:
                return None
            try:
                pid = raw.propose(data)
            except NotLeaderError as exc:
                if exc.leader_id is None:
                    return None
                target = exc.leader_id
                continue
            except ProposalDroppedError:
                return None  # transferring, or too much uncommitted: the client backs off
            self.stats.proposals += 1
            self._after_step(node)
            return pid
        return None

    def _transfer(self) -> None:
        hint = self._leader_hint
        if hint is None:
            return
        raw = self.nodes[hint].raw
        if raw is None or not raw.is_leader:
            return
        target = self.rng.choice([v for v in self.voters if v != hint])
        raw.transfer_leadership(target)
        self.stats.transfers += 1
        self._log(lambda: f"transfer leadership {hint} -> {target}")
        self._after_step(self.nodes[hint])

    # --- liveness ---------------------------------------------------------------------

    def _liveness(self) -> None:
        self.phase = "liveness"
        self.net.heal()
        self.net.faults = LinkFaults(0.0, 0.0, 0, min(self.plan.max_delay, 2))
        self.io_healthy = True
        self.crash_mid_ready = 0.0
        for node in self.nodes.values():
            if node.raw is None:
                self._start(node)
            else:
                self._flush(node)
        self._log(lambda: "liveness phase: healed, all nodes up")
        markers: list[bytes] = []
        proposed_at = -1
        start = self.now
        limit = self.options.liveness_ticks
        while self.now - start < limit:
            if any(all(m in seen for seen in self._markers_seen.values()) for m in markers):
                self.stats.liveness_ticks = self.now - start
                return
            # (Re-)propose a marker when none is pending or the last one looks stuck.
            if proposed_at < 0 or self.now - proposed_at > 4 * self.plan.election_tick:
                marker = MARKER + f"{self.seed}-{len(markers)}".encode()
                if self._propose(marker) is not None:
                    markers.append(marker)
                    proposed_at = self.now
            # Some background load, but not more than the slowest replication settings
            # (one entry per round trip) can absorb: this checks progress, not throughput.
            if self.rng.random() < min(self.plan.proposal_rate, 0.1):
                self._next_command += 1
                self._propose(f"c{self._next_command}".encode())
            self._tick()
        raise LivenessFailure(
            f"no proposal applied on every node within {limit} ticks after healing; "
            f"markers {len(markers)}; nodes: {self._describe()}"
        )

    # --- helpers ----------------------------------------------------------------------

    def _check_all_logs(self) -> None:
        logs = {}
        for node in self.nodes.values():
            storage = node.storage
            if node.raw is not None:
                log = node.raw.raft.raft_log
                logs[node.id] = (log.first_index() - 1, log.all_entries())
            else:
                logs[node.id] = (storage.first_index() - 1, storage.all_entries())
        self.checker.check_logs_match(logs)

    def _describe(self) -> str:
        parts = []
        for node in self.nodes.values():
            raw = node.raw
            if raw is None:
                parts.append(f"{node.id}:down")
                continue
            st = raw.status()
            parts.append(
                f"{node.id}:{st.state.value} t{st.term} lead={st.leader_id} "
                f"commit={st.commit} applied={node.applied} last={raw.raft.raft_log.last_index()}"
            )
        return "; ".join(parts)

    def _log(self, line: Callable[[], str]) -> None:
        if self._trace is not None:
            self._trace(f"[seed {self.seed} t{self.now}] {line()}")


def run_seeds(
    start: int,
    count: int,
    options: SimOptions | None = None,
    trace: Callable[[str], None] | None = None,
) -> list[SimStats]:
    """Run seeds start .. start+count-1; the first failure raises `SimulationFailure`."""
    return [Simulation(seed, options, trace).run() for seed in range(start, start + count)]


def seeds_to_run(start: int, count: int, until_stopped: bool) -> Iterator[int]:
    """``count`` seeds from ``start``, or every seed from ``start`` on when the run
    lasts until it is stopped."""
    return itertools.count(start) if until_stopped else iter(range(start, start + count))


class StopRequest:
    """Set by SIGTERM or SIGINT; the run ends after the seed in progress, so a stopped
    run still reports every seed it finished."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)

    def _stop(self, signum: int, frame: object) -> None:
        self.requested = True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rocketcluster.controller.raft.sim",
        description="Deterministic Raft simulation: safety under faults, then liveness.",
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="safety ticks")
    parser.add_argument(
        "--liveness-ticks", type=int, default=DEFAULT_LIVENESS_TICKS, help="liveness bound"
    )
    parser.add_argument(
        "--until-stopped",
        action="store_true",
        help="ignore --seeds: run seeds from --start until SIGTERM or SIGINT, then report",
    )
    parser.add_argument("--trace", action="store_true", help="print faults and elections")
    parser.add_argument("--verbose", action="store_true", help="one line per seed")
    args = parser.parse_args(argv)
    options = SimOptions(steps=args.steps, liveness_ticks=args.liveness_ticks)
    trace = print if args.trace else None
    stop = StopRequest()
    if args.until_stopped:
        stop.install()
    began = time.perf_counter()
    totals = SimStats(seed=args.start)
    worst_liveness = 0
    ran = 0
    for seed in seeds_to_run(args.start, args.seeds, args.until_stopped):
        if stop.requested:
            break
        try:
            stats = Simulation(seed, options, trace).run()
        except SimulationFailure as exc:
            print(f"FAIL {exc}", file=sys.stderr)
            return 1
        ran += 1
        if args.verbose:
            print(stats)
        totals.committed += stats.committed
        totals.leaders += stats.leaders
        totals.crashes += stats.crashes
        totals.snapshots_taken += stats.snapshots_taken
        totals.snapshots_installed += stats.snapshots_installed
        totals.transfers += stats.transfers
        totals.messages += stats.messages
        worst_liveness = max(worst_liveness, stats.liveness_ticks)
    elapsed = time.perf_counter() - began
    print(
        f"ok: {ran} seeds from {args.start} in {elapsed:.1f}s; "
        f"committed={totals.committed} leaders={totals.leaders} crashes={totals.crashes} "
        f"snapshots taken={totals.snapshots_taken} installed={totals.snapshots_installed} "
        f"transfers={totals.transfers} messages={totals.messages} "
        f"worst liveness={worst_liveness} ticks"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
