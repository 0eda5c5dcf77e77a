"""The broker's durable store: commit log, consume queues, index, metadata."""

from rocketcluster.broker.store.commitlog import AppendedRecord, CommitLog
from rocketcluster.broker.store.config import DiskFullPolicy, FlushMode, StoreConfig
from rocketcluster.broker.store.errors import (
    CorruptRecordError,
    DiskFullError,
    GetStatus,
    InvalidNameError,
    OffsetRemovedError,
    PutStatus,
    ReadPastEndError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
)
from rocketcluster.broker.store.gate import WriteGate
from rocketcluster.broker.store.message_store import GetResult, MessageStore, PutResult
from rocketcluster.broker.store.metadata import MetadataStore
from rocketcluster.broker.store.record import MessageToStore, StoredMessage, SysFlag
from rocketcluster.broker.store.recovery import RecoveryReport

__all__ = [
    "AppendedRecord",
    "CommitLog",
    "CorruptRecordError",
    "DiskFullError",
    "DiskFullPolicy",
    "FlushMode",
    "GetResult",
    "GetStatus",
    "InvalidNameError",
    "MessageStore",
    "MessageToStore",
    "MetadataStore",
    "OffsetRemovedError",
    "PutResult",
    "PutStatus",
    "ReadPastEndError",
    "RecoveryReport",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
    "StoredMessage",
    "SysFlag",
    "WriteGate",
]
