"""Typed Raft errors. Each carries the data a caller needs to react, not just a string.

Invariant breaches raise `RaftInvariantError` instead of using `assert`, because
`python -O` strips asserts and a silently corrupted log is worse than a crash.
"""

from __future__ import annotations

from rocketcluster.controller.raft.types import MessageType


class RaftError(Exception):
    """Base class of every error raised by the Raft core and its storage."""


class ConfigError(RaftError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid raft config: {field}: {reason}")
        self.field = field
        self.reason = reason


class ProposalDroppedError(RaftError):
    """The proposal was not appended; retry it (elsewhere, or later)."""


class NotLeaderError(ProposalDroppedError):
    """Raised on followers and candidates. `leader_id` is the leader this node currently
    follows (None while unknown), so the server can answer NOT_LEADER with its address."""

    def __init__(self, node_id: int, leader_id: int | None, term: int) -> None:
        hint = f"leader is {leader_id}" if leader_id is not None else "no leader known yet"
        super().__init__(f"node {node_id} is not the leader in term {term} ({hint}); send it there")
        self.node_id = node_id
        self.leader_id = leader_id
        self.term = term


class LeadershipTransferInProgressError(ProposalDroppedError):
    """The leader is handing over to `transferee`; proposals resume on the new leader."""

    def __init__(self, node_id: int, transferee: int, term: int) -> None:
        super().__init__(
            f"node {node_id} is transferring leadership to {transferee} in term {term}; "
            "retry against the new leader"
        )
        self.node_id = node_id
        self.transferee = transferee
        self.term = term


class UncommittedBacklogFullError(ProposalDroppedError):
    """The leader already holds `limit` uncommitted entries: followers are not keeping up
    (or a quorum is unreachable). Back off and retry; accepting more would only grow a
    tail that may never commit."""

    def __init__(self, node_id: int, uncommitted: int, limit: int) -> None:
        super().__init__(
            f"leader {node_id} has {uncommitted} uncommitted entries (limit {limit}); "
            "retry once they commit"
        )
        self.node_id = node_id
        self.uncommitted = uncommitted
        self.limit = limit


class StepLocalMessageError(RaftError):
    """A peer sent a message kind only the node itself may produce, or one without a term."""

    def __init__(self, msg_type: MessageType, from_id: int) -> None:
        super().__init__(
            f"refusing {msg_type.name} from node {from_id}: local or term-less messages "
            "never come from peers"
        )
        self.msg_type = msg_type
        self.from_id = from_id


class StepPeerNotFoundError(RaftError):
    """A response came from a node outside the configured membership."""

    def __init__(self, msg_type: MessageType, from_id: int) -> None:
        super().__init__(
            f"{msg_type.name} involving node {from_id}, which is not a member of this cluster"
        )
        self.msg_type = msg_type
        self.from_id = from_id


class MisroutedMessageError(RaftError):
    """A message addressed to another node reached this one: the transport is confused."""

    def __init__(self, node_id: int, to: int, msg_type: MessageType) -> None:
        super().__init__(f"node {node_id} received {msg_type.name} addressed to node {to}")
        self.node_id = node_id
        self.to = to
        self.msg_type = msg_type


class ReadyNotAdvancedError(RaftError):
    """`ready()` was called again before `advance()` acknowledged the previous batch."""

    def __init__(self) -> None:
        super().__init__("call advance() with the previous Ready before asking for a new one")


class CompactedError(RaftError):
    """The requested index was folded into a snapshot; send or load the snapshot."""

    def __init__(self, index: int, first_index: int) -> None:
        super().__init__(f"log index {index} is compacted (first available {first_index})")
        self.index = index
        self.first_index = first_index


class UnavailableError(RaftError):
    """The requested index is past the end of the log."""

    def __init__(self, index: int, last_index: int) -> None:
        super().__init__(f"log index {index} is not available (last index {last_index})")
        self.index = index
        self.last_index = last_index


class SnapshotOutOfDateError(RaftError):
    """A snapshot older than the one already held was offered; keep the newer one."""

    def __init__(self, index: int, current_index: int) -> None:
        super().__init__(f"snapshot at {index} is older than the current one at {current_index}")
        self.index = index
        self.current_index = current_index


class SnapshotTemporarilyUnavailableError(RaftError):
    """Storage is still producing a snapshot; the leader retries later."""

    def __init__(self) -> None:
        super().__init__("snapshot temporarily unavailable")


class RaftInvariantError(RaftError):
    """A state the protocol rules out was reached: a bug, or storage that lost data.

    `invariant` names the rule; `detail` carries the numbers that broke it.
    """

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"raft invariant violated: {invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail
