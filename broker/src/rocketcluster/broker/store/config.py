"""StoreConfig: every setting of the message store in one validated model."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rocketcluster.broker.store.record import END_FILE_MIN_BLANK_LENGTH, HEADER_SIZE

MIB = 1 << 20


class FlushMode(StrEnum):
    """``sync``: a write is acknowledged after the fsync that covers it (group commit).
    ``async``: fsync every ``flush_interval_ms`` or ``flush_bytes``, whichever first."""

    SYNC = "sync"
    ASYNC = "async"


class DiskFullPolicy(StrEnum):
    """What retention may do when the disk passes ``disk_max_used_ratio``.

    ``reject``: delete only segments whose retention time is over, or whose every
    message each consumer group has consumed (retention.py); when that is not enough,
    writes are refused above ``disk_full_ratio`` until space returns (Kafka's way).
    ``deleteOldest``: delete the oldest segments, consumed or not (RocketMQ's forcible
    clean)."""

    REJECT = "reject"
    DELETE_OLDEST = "deleteOldest"


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root_dir: Path
    segment_size: int = Field(default=256 * MIB, ge=4096)
    flush: FlushMode = FlushMode.ASYNC
    flush_interval_ms: int = Field(default=500, ge=1)
    flush_bytes: int = Field(default=4 * MIB, ge=4096)
    sync_flush_timeout_ms: int = Field(default=5000, ge=1)
    max_message_bytes: int = Field(default=4 * MIB, ge=1)
    max_properties_bytes: int = Field(default=32767, ge=64, le=32767)
    retention_hours: float = Field(default=72.0, gt=0)
    # Retention also deletes from the head while the disk is fuller than this ratio or
    # the commit log is larger than max_store_bytes (RocketMQ's diskMaxUsedSpaceRatio).
    disk_max_used_ratio: float = Field(default=0.75, gt=0, le=1)
    max_store_bytes: int | None = Field(default=None, ge=1)
    disk_full: DiskFullPolicy = DiskFullPolicy.REJECT
    # Writes are refused (DISK_FULL) while the disk is fuller than this ratio.
    disk_full_ratio: float = Field(default=0.95, gt=0, le=1)
    retention_interval_ms: int = Field(default=10_000, ge=10)
    # Consume-queue entries per stored block (consumequeue.py): a busy queue writes a
    # row of the database per block.
    cq_block_entries: int = Field(default=64, ge=1, le=4096)
    checkpoint_interval_ms: int = Field(default=1000, ge=10)
    index_map_size: int = Field(default=64 << 30, ge=MIB)
    index_entries_per_table: int = Field(default=4_000_000, ge=16)

    @model_validator(mode="after")
    def _segment_holds_largest_record(self) -> Self:
        largest = HEADER_SIZE + 127 + self.max_properties_bytes + self.max_message_bytes
        if largest + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            raise ValueError(
                f"segment_size {self.segment_size} cannot hold the largest record "
                f"({largest} bytes): raise segment_size or lower max_message_bytes"
            )
        if self.disk_max_used_ratio > self.disk_full_ratio:
            raise ValueError("disk_max_used_ratio must not exceed disk_full_ratio")
        return self

    @property
    def commitlog_dir(self) -> Path:
        return self.root_dir / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root_dir / "index"

    @property
    def metadata_dir(self) -> Path:
        return self.root_dir / "metadata"

    @property
    def quarantine_dir(self) -> Path:
        return self.root_dir / "quarantine"

    @property
    def checkpoint_path(self) -> Path:
        return self.root_dir / "checkpoint"

    @property
    def lock_path(self) -> Path:
        return self.root_dir / "lock"
