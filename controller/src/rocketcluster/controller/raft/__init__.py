"""A pure, deterministic Raft core (etcd-raft style) and its simulator.

`RawNode` is the entry point: feed it ticks, peer messages and proposals; drain `Ready`
batches (persist, send, apply, `advance`). See `rawnode.py` for the driver contract.
"""

from rocketcluster.controller.raft.config import Config
from rocketcluster.controller.raft.errors import (
    CompactedError,
    ConfigError,
    LeadershipTransferInProgressError,
    MisroutedMessageError,
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
    RaftInvariantError,
    ReadyNotAdvancedError,
    SnapshotOutOfDateError,
    SnapshotTemporarilyUnavailableError,
    StepLocalMessageError,
    StepPeerNotFoundError,
    UnavailableError,
    UncommittedBacklogFullError,
)
from rocketcluster.controller.raft.rawnode import PeerProgress, RawNode, Ready, Status
from rocketcluster.controller.raft.storage import MemoryStorage, Storage
from rocketcluster.controller.raft.types import (
    NO_NODE,
    Entry,
    HardState,
    Message,
    MessageType,
    ProposalId,
    Snapshot,
    SnapshotMetadata,
    SnapshotStatus,
    SoftState,
    StateType,
)

__all__ = [
    "NO_NODE",
    "CompactedError",
    "Config",
    "ConfigError",
    "Entry",
    "HardState",
    "LeadershipTransferInProgressError",
    "MemoryStorage",
    "Message",
    "MessageType",
    "MisroutedMessageError",
    "NotLeaderError",
    "PeerProgress",
    "ProposalDroppedError",
    "ProposalId",
    "RaftError",
    "RaftInvariantError",
    "RawNode",
    "Ready",
    "ReadyNotAdvancedError",
    "Snapshot",
    "SnapshotMetadata",
    "SnapshotOutOfDateError",
    "SnapshotStatus",
    "SnapshotTemporarilyUnavailableError",
    "SoftState",
    "StateType",
    "Status",
    "StepLocalMessageError",
    "StepPeerNotFoundError",
    "Storage",
    "UnavailableError",
    "UncommittedBacklogFullError",
]
