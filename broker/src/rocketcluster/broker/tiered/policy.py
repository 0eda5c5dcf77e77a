"""Decisions of the tier, pure: where a read is served from, and when a queue's pending
messages make a batch worth uploading."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rocketcluster.api.tiered_spec import TieredReadPolicy


def read_from_tier(
    policy: TieredReadPolicy,
    *,
    in_tier: bool,
    on_disk: bool,
    in_memory: bool | None,
) -> bool:
    """Whether a read of one message goes to the tier.

    DISABLE never reads it; NOT_IN_DISK only for what the local store no longer has;
    NOT_IN_MEM also for what is on disk but not in the page cache (``in_memory`` None:
    the filesystem cannot tell, so the disk is read); FORCE whenever the tier has it.
    What the tier does not have is always read locally.
    """
    if not in_tier or policy is TieredReadPolicy.DISABLE:
        return False
    if policy is TieredReadPolicy.FORCE or not on_disk:
        return True
    return policy is TieredReadPolicy.NOT_IN_MEM and in_memory is False


@dataclass(frozen=True, slots=True)
class Batch:
    count: int  # messages from the queue's committed position
    bytes: int


def plan_batch(
    sizes: Sequence[int],
    *,
    batch_bytes: int,
    pending_for_s: float,
    interval_s: float,
    max_count: int = 65_536,
) -> Batch | None:
    """The next segment of a queue, from the record sizes pending after its committed
    position, or None to wait for more.

    A batch is full at ``batch_bytes`` (or ``max_count`` messages); a partial one goes
    once data has waited ``interval_s``. The first message always fits, however large,
    so one big message is uploaded alone and never blocks its queue.
    """
    if not sizes:
        return None
    total = count = 0
    for size in sizes:
        if count and (total + size > batch_bytes or count >= max_count):
            return Batch(count, total)
        total += size
        count += 1
    if total >= batch_bytes or count >= max_count or pending_for_s >= interval_s:
        return Batch(count, total)
    return None


def coalesce(
    spans: Sequence[tuple[int, int]], max_gap: int, max_run: int
) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Group ``(offset, size)`` spans, in offset order, into runs to read at once:
    ``(start, end, members)``. A span joins the run before it when the bytes between
    them are at most ``max_gap`` and the run stays within ``max_run`` (a span larger
    than that is a run of its own)."""
    runs: list[tuple[int, int, list[tuple[int, int]]]] = []
    for offset, size in spans:
        if runs:
            start, end, members = runs[-1]
            if offset >= end and offset - end <= max_gap and offset + size - start <= max_run:
                members.append((offset, size))
                runs[-1] = (start, offset + size, members)
                continue
        runs.append((offset, offset + size, [(offset, size)]))
    return runs
