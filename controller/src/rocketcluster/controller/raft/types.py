"""Values the Raft core consumes and produces: entries, hard state, snapshots, messages.

Everything here is an immutable value so a `Ready` batch handed to the driver can never be
changed behind its back by a later `step`. Node ids are positive integers; `NO_NODE` (0)
stands for "nobody" in the fields that go to disk or on the wire (`HardState.vote`,
`Message.to`), because those encodings have no null.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

NO_NODE = 0
"""The node id meaning "none": no vote cast, no leader known."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. An empty `data` is the no-op a new leader appends (Raft §5.4.2)."""

    term: int
    index: int
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on disk before any message that depends on it leaves the node.

    `term` and `vote` make sure a node never votes twice in one term across a crash;
    `commit` lets a restarted node re-apply what it knew committed without asking anyone.
    """

    term: int = 0
    vote: int = NO_NODE
    commit: int = 0

    @property
    def is_empty(self) -> bool:
        return self.term == 0 and self.vote == NO_NODE and self.commit == 0


EMPTY_HARD_STATE = HardState()


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    """The log position a snapshot replaces: every entry up to `index` (of `term`)."""

    index: int = 0
    term: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Application state as of `metadata.index`; `data` is opaque to the core."""

    metadata: SnapshotMetadata = SnapshotMetadata()
    data: bytes = b""

    @property
    def is_empty(self) -> bool:
        return self.metadata.index == 0


EMPTY_SNAPSHOT = Snapshot()


class MessageType(IntEnum):
    """Message kinds. Local kinds never cross the network (`RawNode.step` refuses them)."""

    HUP = 0  # local: start an election
    BEAT = 1  # local: leader heartbeat timer fired
    PROP = 2  # local: a client proposal
    APP = 3  # AppendEntries
    APP_RESP = 4
    VOTE = 5  # RequestVote
    VOTE_RESP = 6
    PRE_VOTE = 7  # "would you vote for me?" without bumping anyone's term
    PRE_VOTE_RESP = 8
    SNAP = 9  # InstallSnapshot
    HEARTBEAT = 10
    HEARTBEAT_RESP = 11
    TRANSFER_LEADER = 12  # local on the leader, forwarded by followers
    TIMEOUT_NOW = 13  # leader → transfer target: campaign now
    CHECK_QUORUM = 14  # local: leader checks it still hears a majority
    SNAP_STATUS = 15  # local: driver reports a snapshot send outcome
    UNREACHABLE = 16  # local: driver reports a peer it cannot reach


LOCAL_MESSAGES = frozenset(
    {
        MessageType.HUP,
        MessageType.BEAT,
        MessageType.PROP,
        MessageType.CHECK_QUORUM,
        MessageType.SNAP_STATUS,
        MessageType.UNREACHABLE,
    }
)
"""Kinds only the node itself may step; a peer sending one is a bug or an attack."""

RESPONSE_MESSAGES = frozenset(
    {
        MessageType.APP_RESP,
        MessageType.VOTE_RESP,
        MessageType.PRE_VOTE_RESP,
        MessageType.HEARTBEAT_RESP,
        MessageType.UNREACHABLE,
    }
)


@dataclass(frozen=True, slots=True)
class Message:
    """One Raft message. Which fields mean something depends on `type`:

    - APP: `index`/`log_term` identify the entry just before `entries`; `commit` is the
      leader's commit index.
    - APP_RESP: `index` is the follower's last matching index, or on `reject` the index that
      did not match, with `reject_hint` (and `log_term`, the follower's term there) telling
      the leader where to probe next without walking back one entry per round trip.
    - VOTE / PRE_VOTE: `index`/`log_term` describe the candidate's last entry; `transfer`
      marks a campaign started by leadership transfer, which voters grant even while they
      still hear a leader.
    - HEARTBEAT: `commit` is capped at what the follower is known to hold.
    - SNAP: `snapshot` carries the state machine image.
    """

    type: MessageType
    to: int
    from_id: int
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    snapshot: Snapshot | None = None
    reject: bool = False
    reject_hint: int = 0
    transfer: bool = False


class StateType(Enum):
    """A node's role. PRE_CANDIDATE polls for votes without incrementing its term."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile role information: useful to report, never persisted."""

    leader_id: int | None
    state: StateType


class SnapshotStatus(Enum):
    """Outcome of sending a snapshot, reported by the driver's transport."""

    FINISH = "finish"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class ProposalId:
    """Where a proposal landed. It took effect only if the entry applied at `index` has
    `term`: a later leader may overwrite an uncommitted entry with something else."""

    term: int
    index: int


# Enum members as plain module constants, for the hot paths of the core and the
# simulator: on Python 3.11 `EnumType` defines `__getattr__`, which routes every class
# attribute read (`MessageType.APP`) through a slow Python-level hook (~10x a global
# read). Import these where a member is read on every step.
MSG_APP = MessageType.APP
MSG_APP_RESP = MessageType.APP_RESP
MSG_BEAT = MessageType.BEAT
MSG_CHECK_QUORUM = MessageType.CHECK_QUORUM
MSG_HEARTBEAT = MessageType.HEARTBEAT
MSG_HEARTBEAT_RESP = MessageType.HEARTBEAT_RESP
MSG_HUP = MessageType.HUP
MSG_PRE_VOTE = MessageType.PRE_VOTE
MSG_PRE_VOTE_RESP = MessageType.PRE_VOTE_RESP
MSG_PROP = MessageType.PROP
MSG_SNAP = MessageType.SNAP
MSG_SNAP_STATUS = MessageType.SNAP_STATUS
MSG_TIMEOUT_NOW = MessageType.TIMEOUT_NOW
MSG_TRANSFER_LEADER = MessageType.TRANSFER_LEADER
MSG_UNREACHABLE = MessageType.UNREACHABLE
MSG_VOTE = MessageType.VOTE
MSG_VOTE_RESP = MessageType.VOTE_RESP
STATE_CANDIDATE = StateType.CANDIDATE
STATE_FOLLOWER = StateType.FOLLOWER
STATE_LEADER = StateType.LEADER
STATE_PRE_CANDIDATE = StateType.PRE_CANDIDATE
SNAPSHOT_FAILURE = SnapshotStatus.FAILURE
SNAPSHOT_FINISH = SnapshotStatus.FINISH
