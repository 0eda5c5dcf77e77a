"""Scale-in decisions: a broker group goes only once it is drained, a replica only
once it is neither the master nor needed for minInSyncReplicas.

Drained means nothing on the group still waits for a reader: the group takes no
writes (write-disabled through the controllers; producers move to the other
groups), every consumer group that reads a topic there has committed up to the end
of every queue with nothing in flight, no topic holds messages that no consumer
group has ever read, and no delayed or half (transaction) message is pending. The
annotation ``rocketcluster.io/scale-in: force`` on the RocketCluster accepts the
loss of whatever is left.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketcluster.api.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPIC_PREFIX
from rocketcluster.operator.orchestrate.model import GroupObservation
from rocketcluster.operator.orchestrate.steps import Step, StepKind, blocked, done, wait

FORCE_ANNOTATION = "rocketcluster.io/scale-in"


@dataclass(frozen=True)
class QueueRange:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class Consumption:
    consumer_group: str
    topic: str
    queue_id: int
    committed: int
    inflight: int


@dataclass(frozen=True)
class GroupContents:
    """What one broker group's master holds, from its admin API."""

    queues: tuple[QueueRange, ...]
    consumption: tuple[Consumption, ...]
    pending_timers: int = 0
    pending_transactions: int = 0


def _internal(topic: str) -> bool:
    return topic.startswith((SYSTEM_TOPIC_PREFIX, RETRY_PREFIX))


def drain_problems(
    contents: GroupContents,
    ignore_topics: frozenset[str] = frozenset(),
    ignore_groups: frozenset[str] = frozenset(),
) -> list[str]:
    """Why the group is not drained yet (empty: drained), in a few readable lines.
    ``ignore_topics`` and ``ignore_groups`` (the canary's: render/canary.py) never
    keep a group: their messages are probes, nobody's data."""
    problems: list[str] = []
    by_topic: dict[str, dict[int, QueueRange]] = {}
    for q in contents.queues:
        if q.topic not in ignore_topics:
            by_topic.setdefault(q.topic, {})[q.queue_id] = q
    consumption = [
        c
        for c in contents.consumption
        if c.topic not in ignore_topics and c.consumer_group not in ignore_groups
    ]
    readers: dict[str, set[str]] = {}
    for c in consumption:
        readers.setdefault(c.topic, set()).add(c.consumer_group)
    behind: dict[str, int] = {}
    inflight: dict[str, int] = {}
    for c in consumption:
        queue = by_topic.get(c.topic, {}).get(c.queue_id)
        end = queue.max_offset if queue else c.committed
        if end > c.committed:
            behind[c.consumer_group] = behind.get(c.consumer_group, 0) + end - c.committed
        if c.inflight:
            inflight[c.consumer_group] = inflight.get(c.consumer_group, 0) + c.inflight
    for group, count in sorted(behind.items()):
        problems.append(f"consumer group {group} has {count} unconsumed messages")
    for group, count in sorted(inflight.items()):
        problems.append(f"consumer group {group} has {count} messages in flight")
    for topic, queues in sorted(by_topic.items()):
        held = sum(q.max_offset - q.min_offset for q in queues.values())
        if held and topic not in readers and not _internal(topic):
            what = "dead-lettered" if topic.startswith(DLQ_PREFIX) else "unread"
            problems.append(
                f"topic {topic} holds {held} {what} messages that no consumer group has read"
            )
    if contents.pending_timers:
        problems.append(f"{contents.pending_timers} delayed messages are not yet due")
    if contents.pending_transactions:
        problems.append(f"{contents.pending_transactions} transactions are not yet resolved")
    return problems


def groups_to_remove(desired: int, existing: list[str], index_of: dict[str, int]) -> list[str]:
    """Existing groups beyond the desired count, highest index first."""
    extra = [g for g in existing if index_of[g] >= desired]
    return sorted(extra, key=lambda g: index_of[g], reverse=True)


def replica_scale_in_step(group: GroupObservation, desired_replicas: int) -> Step:
    """Whether a group may shrink to ``desired_replicas`` now (the StatefulSet then
    removes its highest ordinals): never its master, never below minInSyncReplicas."""
    current = len([p for p in group.pods if p.exists])
    if desired_replicas >= current:
        return done()
    leaving = sorted(group.pods, key=lambda p: p.name)[desired_replicas:]
    staying = sorted(group.pods, key=lambda p: p.name)[:desired_replicas]
    if group.view is None:
        return blocked("the controllers do not answer: replicas are not removed without them")
    master = group.master_pod
    if master is not None and master in leaving:
        target = next((p for p in staying if p.ready and group.in_sync(p)), None)
        if target is None:
            return wait(f"no caught-up replica among those staying in {group.name}")
        return Step(
            StepKind.SWITCHOVER,
            f"master {master.name} is being removed: hand over to {target.name}",
            pod=master.name,
            target=target.broker_id,
        )
    in_sync = [p for p in staying if group.in_sync(p)]
    if len(in_sync) < group.min_in_sync:
        return blocked(
            f"after removing {', '.join(p.name for p in leaving)}, {len(in_sync)} in-sync "
            f"replicas would remain, fewer than minInSyncReplicas ({group.min_in_sync})"
        )
    return done("the replicas may go")
