"""TopicRegistry: the topics and consumer groups this broker serves.

Declared ones come from the manifest at start (created or updated), then from the
controllers' catalogue; others through the admin API; everything is kept in the
store's metadata and cached here. Unknown names are TOPIC_NOT_FOUND /
CONSUMER_GROUP_NOT_FOUND unless auto-creation is on.

A name the catalogue dropped is *retired*, not deleted: it is no longer served, but
its spec and consumer offsets stay in the metadata and its messages in the store, so
nothing is lost and putting it back resumes where it stopped (and a queue count is
never shrunk under stored messages). Only the admin API deletes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from rocketcluster.api.names import group_name_problem, topic_name_problem
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.store import MetadataStore

DEFAULT_QUEUES = 8
Spec = TypeVar("Spec", TopicSpec, ConsumerGroupSpec)
RETIRED_KEY = "registry/retired"


class TopicRegistry:
    def __init__(self, metadata: MetadataStore, *, auto_create: bool) -> None:
        self._metadata = metadata
        self.auto_create = auto_create
        self._topics = {t.name: t for t in metadata.list_topics()}
        self._groups = {g.name: g for g in metadata.list_groups()}
        saved = metadata.get_value(RETIRED_KEY)
        retired = saved if isinstance(saved, dict) else {}
        self._retired_topics = {
            n: self._topics.pop(n) for n in retired.get("topics", []) if n in self._topics
        }
        self._retired_groups = {
            n: self._groups.pop(n) for n in retired.get("groups", []) if n in self._groups
        }

    def apply_declared(
        self, topics: list[TopicSpec], groups: list[ConsumerGroupSpec], *, revive: bool = True
    ) -> None:
        """Create or update what the manifest declares (never deletes, never shrinks a
        queue count the catalogue or the admin API raised since). Without ``revive`` (a
        slave adopting its master's metadata) retired names stay retired: only this
        broker's own catalogue brings them back."""
        changed_topics = []
        for topic in topics:
            if not revive and topic.name in self._retired_topics:
                continue
            topic = self.unshrunk(topic)  # noqa: PLW2901
            if self._topics.get(topic.name) != topic:
                changed_topics.append(topic)
        self.put_topics(changed_topics)
        self.put_groups(
            [
                group
                for group in groups
                if (revive or group.name not in self._retired_groups)
                and self._groups.get(group.name) != group
            ]
        )

    def _serve(
        self, specs: Sequence[Spec], served: dict[str, Spec], retired: dict[str, Spec]
    ) -> None:
        """``specs`` served from now on; the retired ones among them no longer are."""
        revived = False
        for spec in specs:
            served[spec.name] = spec
            revived |= retired.pop(spec.name, None) is not None
        if revived:
            self._save_retired()

    def _save_retired(self) -> None:
        self._metadata.put_value(
            RETIRED_KEY,
            {"topics": sorted(self._retired_topics), "groups": sorted(self._retired_groups)},
        )

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

    def unshrunk(self, topic: TopicSpec) -> TopicSpec:
        """``topic`` with at least the queues already known for it: a queue count never
        shrinks under stored messages (put_topic refuses that)."""
        known = self.known_topic(topic.name)
        if known is not None and topic.queues < known.queues:
            return topic.model_copy(update={"queues": known.queues})
        return topic

    def known_topic(self, name: str) -> TopicSpec | None:
        """The topic's spec, served or retired."""
        return self._topics.get(name) or self._retired_topics.get(name)

    def put_topic(self, spec: TopicSpec) -> TopicSpec:
        """Create or update a topic (a retired one is served again)."""
        self.put_topics([spec])
        return spec

    def put_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create or update every topic of ``specs`` in one metadata write (all or
        none: a shrink refused for one refuses them all)."""
        for spec in specs:
            existing = self.known_topic(spec.name)
            if existing is not None and spec.queues < existing.queues:
                raise MessagingError(
                    Code.BAD_REQUEST,
                    f"topic {spec.name!r} has {existing.queues} queues; shrinking would "
                    "strand messages (create a new topic instead)",
                )
        self._metadata.put_topics(specs)
        self._serve(specs, self._topics, self._retired_topics)

    def retire_topic(self, name: str) -> bool:
        """Stop serving ``name``, keeping its spec and messages; False if not served."""
        spec = self._topics.pop(name, None)
        if spec is None:
            return False
        self._retired_topics[name] = spec
        self._save_retired()
        return True

    def retired_topics(self) -> list[str]:
        return sorted(self._retired_topics)

    def ensure_system_topic(self, name: str, queues: int = 1) -> TopicSpec:
        topic = self._topics.get(name)
        if topic is None:
            topic = self.put_topic(
                TopicSpec(name=name, queues=queues, messageType=MessageType.MIXED)
            )
        return topic

    def delete_topic(self, name: str) -> bool:
        self._topics.pop(name, None)
        if self._retired_topics.pop(name, None) is not None:
            self._save_retired()
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
        """Create or update a consumer group (a retired one is served again, from the
        offsets it had)."""
        self.put_groups([spec])
        return spec

    def put_groups(self, specs: Sequence[ConsumerGroupSpec]) -> None:
        """Create or update every group of ``specs`` in one metadata write."""
        self._metadata.put_groups(specs)
        self._serve(specs, self._groups, self._retired_groups)

    def retire_group(self, name: str) -> bool:
        """Stop serving ``name``, keeping its spec and consumer offsets."""
        spec = self._groups.pop(name, None)
        if spec is None:
            return False
        self._retired_groups[name] = spec
        self._save_retired()
        return True

    def retired_groups(self) -> list[str]:
        return sorted(self._retired_groups)

    def delete_group(self, name: str) -> bool:
        self._groups.pop(name, None)
        if self._retired_groups.pop(name, None) is not None:
            self._save_retired()
        return self._metadata.delete_group(name)
