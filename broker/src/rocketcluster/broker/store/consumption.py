"""What consumer groups still need of the commit log (the disk-full policy ``reject``)
and how many messages retention removes that no group had consumed (either policy).

A queue's *consumed index* is the smallest committed offset of the groups known on its
topic — a pull group's committed offset, a POP group's ack position (the lowest offset
it has not acknowledged, which is what POP commits) — or the queue's start when:

- no group has an offset on the topic: nobody has read it, and a group that comes
  later starts at the earliest retained message (pop.py), so every message is needed;
- a group known on the topic — by an offset on another of its queues, or by a
  connected consumer subscribed to it (``subscribers``) — has no offset on this
  queue: it starts the queue at the earliest retained message too.

A group declared (spec.consumerGroups) but never subscribed names no topic, so it
holds nothing until it consumes; a group gone for good holds its topics until it is
deleted or their retention time is over.

Retry (``%RETRY%group``), dead-letter, timer and transaction-half topics are queues
like any other: with no group offset they are needed from their start. Only the
broker's own bookkeeping topics (``bookkeeping``: the POP journal, traces, stats) are
neither needed nor counted; the broker gives them to the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from rocketcluster.broker.store.consumequeue import ConsumeQueue

Offsets = Mapping[tuple[str, str, int], int]  # (group, topic, queue id) -> offset


def groups_by_topic(
    offsets: Offsets, subscribers: Mapping[str, set[str]] | None = None
) -> dict[str, set[str]]:
    """topic -> the groups known on it: with an offset on one of its queues, or
    subscribed to it by a connected consumer."""
    found: dict[str, set[str]] = defaultdict(set)
    for group, topic, _ in offsets:
        found[topic].add(group)
    for topic, groups in (subscribers or {}).items():
        found[topic] |= groups
    return found


def consumed_index(cq: ConsumeQueue, groups: Iterable[str], offsets: Offsets) -> int:
    """The index below which every group known on ``cq``'s topic has consumed ``cq``
    (its start when no group has consumed it)."""
    low = cq.min_index
    committed = None
    for group in groups:
        offset = offsets.get((group, cq.topic, cq.queue_id))
        if offset is None:
            return low
        committed = offset if committed is None else min(committed, offset)
    return low if committed is None else max(low, committed)


def needed_from(
    queues: Iterable[ConsumeQueue],
    offsets: Offsets,
    bookkeeping: frozenset[str],
    subscribers: Mapping[str, set[str]] | None = None,
) -> int | None:
    """The smallest commit-log offset some consumer group has not consumed yet (None:
    every queue is consumed to its end)."""
    by_topic = groups_by_topic(offsets, subscribers)
    lowest: int | None = None
    for cq in queues:
        if cq.topic in bookkeeping or cq.min_index >= cq.max_index:
            continue
        index = consumed_index(cq, by_topic.get(cq.topic, ()), offsets)
        if index >= cq.max_index:
            continue
        entry = cq.get(index)
        if entry is None:  # removed meanwhile: hold from the queue's first entry
            entry = cq.get(cq.min_index)
            if entry is None:
                continue
        if lowest is None or entry.physical_offset < lowest:
            lowest = entry.physical_offset
    return lowest


def unconsumed_below(
    queues: Iterable[ConsumeQueue],
    offsets: Offsets,
    bookkeeping: frozenset[str],
    min_physical: int,
    edges: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    subscribers: Mapping[str, set[str]] | None = None,
) -> int:
    """Messages stored below ``min_physical`` that no group has consumed: what
    deleting the log below it loses unread. ``edges`` (first and last commit-log
    offset of each queue's flushed entries) skips the queues that start above it."""
    by_topic = groups_by_topic(offsets, subscribers)
    total = 0
    for cq in queues:
        if cq.topic in bookkeeping or cq.min_index >= cq.max_index:
            continue
        if edges is not None:
            edge = edges.get((cq.topic, cq.queue_id))
            first = edge[0] if edge is not None else cq.first_unflushed_offset()
            if first is None or first >= min_physical:
                continue
        consumed = consumed_index(cq, by_topic.get(cq.topic, ()), offsets)
        cut = cq.first_index_at_or_after(min_physical)
        total += max(0, cut - consumed)
    return total
