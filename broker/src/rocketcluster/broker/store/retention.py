"""Retention policy (pure): how many head segments to delete, and why.

A segment goes when it is older than the retention time (by its last write, as
RocketMQ's CleanCommitLogService judges), or while the disk is fuller than the ceiling
ratio or the commit log is larger than ``max_store_bytes``. The segment being written
and any segment holding unflushed bytes always stay; with tiered storage, so does every
segment holding a message not yet in the tier (``held_from``): retention pauses rather
than lose data, and says how many segments it held back.
"""

from __future__ import annotations

import functools
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
    held_by_tier: int = 0  # segments due for deletion that wait for their upload


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
    held_from: int | None = None,
) -> RetentionDecision:
    """``held_from``: the commit-log offset from which data is not all in the tier yet
    (None: no tier, or everything is uploaded)."""
    wanted = functools.partial(
        _wanted,
        segments,
        now=now,
        retention_hours=retention_hours,
        disk_used_ratio=disk_used_ratio,
        disk_max_used_ratio=disk_max_used_ratio,
        segment_size=segment_size,
        disk_total_bytes=disk_total_bytes,
        max_store_bytes=max_store_bytes,
    )
    unheld = wanted(_deletable(segments, flushed_offset))
    if held_from is None:
        return unheld
    held = wanted(_deletable(segments, min(flushed_offset, held_from)))
    return RetentionDecision(
        held.delete_count, held.reasons, unheld.delete_count - held.delete_count
    )


def _deletable(segments: list[SegmentInfo], limit: int) -> int:
    """Head segments that end at or before ``limit`` (never the one being written)."""
    deletable = 0
    for seg in segments[:-1]:
        if seg.end > limit:
            break
        deletable += 1
    return deletable


def _wanted(
    segments: list[SegmentInfo],
    deletable: int,
    *,
    now: float,
    retention_hours: float,
    disk_used_ratio: float,
    disk_max_used_ratio: float,
    segment_size: int,
    disk_total_bytes: int,
    max_store_bytes: int | None,
) -> RetentionDecision:
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
