"""Retention policy (pure): how many head segments to delete, and why.

A segment goes when it is older than the retention time (by its last write, as
RocketMQ's CleanCommitLogService judges), or while the disk is fuller than the ceiling
ratio or the commit log is larger than ``max_store_bytes``. The segment being written
and any segment holding unflushed bytes always stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeleteReason(StrEnum):
    EXPIRED = "expired"
    DISK_RATIO = "disk-ratio"
    STORE_SIZE = "store-size"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base: int
    end: int
    last_modified: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    delete_count: int
    reasons: tuple[DeleteReason, ...]


def plan_retention(
    segments: list[SegmentInfo],
    *,
    now: float,
    retention_hours: float,
    flushed_offset: int,
    disk_used_ratio: float,
    disk_max_used_ratio: float,
    segment_size: int,
    disk_total_bytes: int,
    max_store_bytes: int | None,
) -> RetentionDecision:
    deletable = 0
    for seg in segments[:-1]:  # never the segment being written
        if seg.end > flushed_offset:
            break
        deletable += 1
    reasons: list[DeleteReason] = []
    count = 0
    horizon = now - retention_hours * 3600
    while count < deletable and segments[count].last_modified < horizon:
        count += 1
    if count:
        reasons.append(DeleteReason.EXPIRED)
    # Space-driven deletion: each deleted segment frees segment_size bytes.
    if disk_total_bytes > 0 and disk_used_ratio > disk_max_used_ratio:
        excess = (disk_used_ratio - disk_max_used_ratio) * disk_total_bytes
        extra = min(deletable, count + max(1, -(-int(excess) // segment_size)))
        if extra > count:
            count = extra
            reasons.append(DeleteReason.DISK_RATIO)
    if max_store_bytes is not None:
        size = len(segments) * segment_size
        need = max(0, -(-(size - max_store_bytes) // segment_size))
        extra = min(deletable, max(count, need))
        if extra > count:
            count = extra
            reasons.append(DeleteReason.STORE_SIZE)
    return RetentionDecision(count, tuple(reasons))
