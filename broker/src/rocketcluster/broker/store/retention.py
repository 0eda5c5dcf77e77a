"""Retention policy (pure): how many head segments to delete, and why.

A segment goes when it is older than the retention time (by its last write, as
RocketMQ's CleanCommitLogService judges), or while the disk is fuller than the ceiling
ratio or the commit log is larger than ``max_store_bytes``. The segment being written
and any segment holding unflushed bytes always stay; with tiered storage, so does every
segment holding a message not yet in the tier (``held_from``): retention pauses rather
than lose data, and says how many segments it held back.

Space-driven deletion (disk ratio, store size) may also be bounded by what consumer
groups still need (``needed_from``: the disk-full policy ``reject``): it then removes
only segments every consumer has read past, and counts the ones it kept. Expired
segments go whatever anyone still needs: retention time is the user's promise.
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
    # Segments space-driven deletion wanted but kept: consumers still need them (reject).
    held_for_consumers: int = 0


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
    needed_from: int | None = None,
) -> RetentionDecision:
    """``held_from``: the commit-log offset from which data is not all in the tier yet
    (None: no tier, or everything is uploaded). ``needed_from``: the commit-log offset
    from which some consumer group still needs messages (None: space-driven deletion is
    not bounded by consumers — the policy ``deleteOldest``, or nothing is needed)."""
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
    limit = flushed_offset if held_from is None else min(flushed_offset, held_from)
    free = wanted(_deletable(segments, limit))
    held_by_tier = 0
    if held_from is not None:
        held_by_tier = wanted(_deletable(segments, flushed_offset)).delete_count
        held_by_tier -= free.delete_count
    if needed_from is None:
        return RetentionDecision(free.delete_count, free.reasons, held_by_tier)
    bounded = wanted(
        _deletable(segments, limit), space_deletable=_deletable(segments, min(limit, needed_from))
    )
    return RetentionDecision(
        bounded.delete_count,
        bounded.reasons,
        held_by_tier,
        free.delete_count - bounded.delete_count,
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
    space_deletable: int | None = None,
    now: float,
    retention_hours: float,
    disk_used_ratio: float,
    disk_max_used_ratio: float,
    segment_size: int,
    disk_total_bytes: int,
    max_store_bytes: int | None,
) -> RetentionDecision:
    """``deletable`` head segments may go when expired; ``space_deletable`` (default:
    as many) when the disk or the store is too full."""
    room = deletable if space_deletable is None else min(deletable, space_deletable)
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
        extra = min(room, count + max(1, -(-int(excess) // segment_size)))
        if extra > count:
            count = extra
            reasons.append(DeleteReason.DISK_RATIO)
    if max_store_bytes is not None:
        size = len(segments) * segment_size
        need = max(0, -(-(size - max_store_bytes) // segment_size))
        extra = min(room, max(count, need))
        if extra > count:
            count = extra
            reasons.append(DeleteReason.STORE_SIZE)
    return RetentionDecision(count, tuple(reasons))
