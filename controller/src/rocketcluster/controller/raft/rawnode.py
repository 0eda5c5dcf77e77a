"""A synchronous facade over the core: Tick, Step, Propose, Ready, Advance.

The driver (an asyncio task in production, a loop in the simulator) owns one `RawNode`
and repeats:

    rd = node.ready()              # when node.has_ready()
    persist rd.snapshot, rd.entries, rd.hard_state   (durably, in that order)
    send rd.messages               # only now: they promise what was just persisted
    apply rd.snapshot, then rd.committed_entries to the state machine
    node.advance(rd)

Nothing in a `Ready` may be skipped or reordered across that line: a vote granted or an
append acknowledged before it is durable can be forgotten by a crash, and then two
leaders can be elected in one term or a committed entry can vanish.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from rocketcluster.controller.raft.config import Config
from rocketcluster.controller.raft.core import Raft
from rocketcluster.controller.raft.errors import (
    MisroutedMessageError,
    NotLeaderError,
    RaftInvariantError,
    ReadyNotAdvancedError,
    StepLocalMessageError,
    StepPeerNotFoundError,
)
from rocketcluster.controller.raft.storage import Storage
from rocketcluster.controller.raft.types import (
    LOCAL_MESSAGES,
    MSG_HUP,
    MSG_PROP,
    MSG_SNAP_STATUS,
    MSG_TRANSFER_LEADER,
    MSG_UNREACHABLE,
    NO_NODE,
    RESPONSE_MESSAGES,
    SNAPSHOT_FAILURE,
    STATE_LEADER,
    Entry,
    HardState,
    Message,
    ProposalId,
    Snapshot,
    SnapshotStatus,
    SoftState,
    StateType,
)


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the core wants done since the last `advance`, with ordering rules.

    - `soft_state`: role/leader if they changed (None otherwise). Report it; never persist.
    - `hard_state`: term/vote/commit to persist if they changed (None otherwise).
    - `entries`: to append to durable storage, replacing any suffix that conflicts.
    - `snapshot`: a snapshot from the leader to persist (replaces the whole log) and load
      into the state machine before `committed_entries`.
    - `messages`: send ONLY AFTER snapshot, entries and hard state above are durable.
    - `committed_entries`: apply in order, after persisting (they may include `entries`).
    - `must_sync`: whether the writes need an fsync (a commit-index-only change does not).
    """

    soft_state: SoftState | None
    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    committed_entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    must_sync: bool

    def applied_cursor(self) -> int:
        """The applied index once this Ready has been applied (0: unchanged)."""
        if self.committed_entries:
            return self.committed_entries[-1].index
        if self.snapshot is not None:
            return self.snapshot.metadata.index
        return 0


class PeerProgress(NamedTuple):
    match: int
    next: int
    state: str


@dataclass(frozen=True, slots=True)
class Status:
    """A point-in-time summary, for admin endpoints and metrics."""

    id: int
    term: int
    vote: int
    commit: int
    applied: int
    leader_id: int | None
    state: StateType
    lead_transferee: int | None
    progress: Mapping[int, PeerProgress] = field(default_factory=dict)
    elections_started: int = 0


class RawNode:
    """Thread-unsafe wrapper: one driver calls it, from one task."""

    def __init__(self, config: Config, storage: Storage, *, rng: random.Random) -> None:
        self._raft = Raft(config, storage, rng)
        self._prev_soft = self._raft.soft_state()
        self._prev_hard = self._raft.hard_state()
        self._outstanding: Ready | None = None

    # --- inputs -----------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick (election and heartbeat timeouts count these)."""
        self._raft.tick()

    def campaign(self) -> None:
        """Start an election now (pre-vote first when enabled) instead of waiting."""
        r = self._raft
        r.step(Message(type=MSG_HUP, to=r.id, from_id=r.id))

    def propose(self, data: bytes) -> ProposalId:
        """Append `data` on the leader; committed once it comes back in committed_entries.

        Raises `NotLeaderError` (with the known leader) on followers and candidates,
        `LeadershipTransferInProgressError` while the leader is handing over, and
        `UncommittedBacklogFullError` while too much is waiting to commit; all three are
        `ProposalDroppedError`.
        """
        r = self._raft
        if r.state is not STATE_LEADER:
            raise NotLeaderError(r.id, r.lead if r.lead != NO_NODE else None, r.term)
        r.step(Message(type=MSG_PROP, to=r.id, from_id=r.id, entries=(Entry(0, 0, data),)))
        return ProposalId(r.term, r.raft_log.last_index())

    def step(self, m: Message) -> None:
        """Feed a message received from a peer."""
        r = self._raft
        if m.type in LOCAL_MESSAGES or m.term == 0:
            # Every message a peer sends carries its term; term 0 means "local" to the core.
            raise StepLocalMessageError(m.type, m.from_id)
        if m.to != r.id:
            raise MisroutedMessageError(r.id, m.to, m.type)
        if m.type in RESPONSE_MESSAGES and m.from_id not in r.trk.progress:
            raise StepPeerNotFoundError(m.type, m.from_id)
        r.step(m)

    def transfer_leadership(self, transferee: int) -> None:
        """Hand leadership to `transferee` (on a follower: forwarded to the leader).

        The leader stops taking proposals, brings the target up to date, then tells it to
        campaign at once; the attempt is dropped after an election timeout.
        """
        r = self._raft
        if transferee not in r.trk.progress:
            raise StepPeerNotFoundError(MSG_TRANSFER_LEADER, transferee)
        r.step(Message(type=MSG_TRANSFER_LEADER, to=r.id, from_id=transferee))

    def report_unreachable(self, peer: int) -> None:
        """The transport failed to reach `peer`: stop streaming to it, probe instead."""
        r = self._raft
        r.step(Message(type=MSG_UNREACHABLE, to=r.id, from_id=peer))

    def report_snapshot(self, peer: int, status: SnapshotStatus) -> None:
        """The transport finished (or failed) sending a snapshot to `peer`."""
        r = self._raft
        r.step(
            Message(
                type=MSG_SNAP_STATUS,
                to=r.id,
                from_id=peer,
                reject=status is SNAPSHOT_FAILURE,
            )
        )

    # --- outputs ----------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether `ready()` would return something (False while a Ready is outstanding)."""
        if self._outstanding is not None:
            return False
        r = self._raft
        log = r.raft_log
        if r.msgs or log.unstable.entries or log.unstable.snapshot is not None:
            return True
        soft = self._prev_soft
        if r.state is not soft.state or (r.lead or None) != soft.leader_id:
            return True
        hard = self._prev_hard
        if r.term != hard.term or r.vote != hard.vote or log.committed != hard.commit:
            return True  # (it can only differ from the previous one by being non-empty)
        return log.committed > log.applied and log.has_next_committed_entries()

    def ready(self) -> Ready:
        """Collect pending work. Call `advance` with it before asking again."""
        if self._outstanding is not None:
            raise ReadyNotAdvancedError()
        r = self._raft
        log = r.raft_log
        unstable = log.unstable
        # Soft and hard state are compared field by field and only built when they
        # changed (most batches carry neither): this runs once per batch.
        prev_soft = self._prev_soft
        lead = r.lead if r.lead != NO_NODE else None
        soft_changed = lead != prev_soft.leader_id or r.state is not prev_soft.state
        prev_hard = self._prev_hard
        term, vote, commit = r.term, r.vote, log.committed
        hard_changed = (
            term != prev_hard.term or vote != prev_hard.vote or commit != prev_hard.commit
        ) and not (term == 0 and vote == NO_NODE and commit == 0)
        entries = tuple(unstable.entries)
        snapshot = unstable.snapshot
        rd = Ready(
            soft_state=SoftState(lead, r.state) if soft_changed else None,
            hard_state=HardState(term=term, vote=vote, commit=commit) if hard_changed else None,
            entries=entries,
            snapshot=snapshot,
            committed_entries=tuple(log.next_committed_entries()),
            messages=tuple(r.msgs),
            must_sync=bool(entries)
            or snapshot is not None
            or term != prev_hard.term
            or vote != prev_hard.vote,
        )
        r.msgs = []
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """Acknowledge that `rd` was persisted, sent and applied."""
        if rd is not self._outstanding:
            raise RaftInvariantError(
                "advance the Ready last returned by ready()",
                "got a different or already advanced Ready",
            )
        self._outstanding = None
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        log = self._raft.raft_log
        applied = rd.applied_cursor()
        if applied:
            log.applied_to(applied)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
        if rd.snapshot is not None:
            log.stable_snap_to(rd.snapshot.metadata.index)

    # --- views ------------------------------------------------------------------------

    @property
    def id(self) -> int:
        return self._raft.id

    @property
    def raft(self) -> Raft:
        """The core, for tests and checkers to inspect. Do not mutate it."""
        return self._raft

    @property
    def term(self) -> int:
        return self._raft.term

    @property
    def state(self) -> StateType:
        return self._raft.state

    @property
    def is_leader(self) -> bool:
        return self._raft.state is STATE_LEADER

    @property
    def leader_id(self) -> int | None:
        lead = self._raft.lead
        return lead if lead != NO_NODE else None

    def status(self) -> Status:
        r = self._raft
        progress: dict[int, PeerProgress] = {}
        if r.state is STATE_LEADER:
            progress = {v: PeerProgress(pr.match, pr.next, pr.state.value) for v, pr in r.trk}
        return Status(
            id=r.id,
            term=r.term,
            vote=r.vote,
            commit=r.raft_log.committed,
            applied=r.raft_log.applied,
            leader_id=self.leader_id,
            state=r.state,
            lead_transferee=r.lead_transferee if r.lead_transferee != NO_NODE else None,
            progress=progress,
            elections_started=r.elections_started,
        )
