"""TopicRegistry: the topics and consumer groups this broker serves.

Declared ones come from the manifest at start (created or updated), others through
the admin API; everything is kept in the store's metadata and cached here. Unknown
names are TOPIC_NOT_FOUND / CONSUMER_GROUP_NOT_FOUND unless auto-creation is on.
"""

from __future__ import annotations

from rocketcluster.api.names import group_name_problem, topic_name_problem
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.store import MetadataStore

DEFAULT_QUEUES = 8


class TopicRegistry:
    def __init__(self, metadata: MetadataStore, *, auto_create: bool) -> None:
        self._metadata = metadata
        self.auto_create = auto_create
        self._topics = {t.name: t for t in metadata.list_topics()}
        self._groups = {g.name: g for g in metadata.list_groups()}

    def apply_declared(self, topics: list[TopicSpec], groups: list[ConsumerGroupSpec]) -> None:
        """Create or update what the manifest declares (never deletes)."""
        for topic in topics:
            if self._topics.get(topic.name) != topic:
                self.put_topic(topic)
        for group in groups:
            if self._groups.get(group.name) != group:
                self.put_group(group)

    # -- topics ----------------------------------------------------------------

    def topics(self) -> list[TopicSpec]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def get_topic(self, name: str) -> TopicSpec | None:
        return self._topics.get(name)

    def require_topic(self, name: str) -> TopicSpec:
        topic = self._topics.get(name)
        if topic is not None:
            return topic
        problem = topic_name_problem(name)
        if problem:
            raise MessagingError(Code.ILLEGAL_TOPIC, f"topic {name!r}: {problem}")
        if self.auto_create:
            return self.put_topic(
                TopicSpec(name=name, queues=DEFAULT_QUEUES, messageType=MessageType.MIXED)
            )
        raise MessagingError(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")

    def put_topic(self, spec: TopicSpec) -> TopicSpec:
        existing = self._topics.get(spec.name)
        if existing is not None and spec.queues < existing.queues:
            raise MessagingError(
                Code.BAD_REQUEST,
                f"topic {spec.name!r} has {existing.queues} queues; shrinking would strand "
                "messages (create a new topic instead)",
            )
        self._metadata.put_topic(spec)
        self._topics[spec.name] = spec
        return spec

    def ensure_system_topic(self, name: str, queues: int = 1) -> TopicSpec:
        topic = self._topics.get(name)
        if topic is None:
            topic = self.put_topic(
                TopicSpec(name=name, queues=queues, messageType=MessageType.MIXED)
            )
        return topic

    def delete_topic(self, name: str) -> bool:
        self._topics.pop(name, None)
        return self._metadata.delete_topic(name)

    # -- consumer groups ---------------------------------------------------------

    def groups(self) -> list[ConsumerGroupSpec]:
        return sorted(self._groups.values(), key=lambda g: g.name)

    def get_group(self, name: str) -> ConsumerGroupSpec | None:
        return self._groups.get(name)

    def require_group(self, name: str) -> ConsumerGroupSpec:
        group = self._groups.get(name)
        if group is not None:
            return group
        problem = group_name_problem(name)
        if problem:
            raise MessagingError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r}: {problem}")
        if self.auto_create:
            return self.put_group(ConsumerGroupSpec(name=name))
        raise MessagingError(
            Code.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name!r} does not exist"
        )

    def put_group(self, spec: ConsumerGroupSpec) -> ConsumerGroupSpec:
        self._metadata.put_group(spec)
        self._groups[spec.name] = spec
        return spec

    def delete_group(self, name: str) -> bool:
        self._groups.pop(name, None)
        return self._metadata.delete_group(name)
