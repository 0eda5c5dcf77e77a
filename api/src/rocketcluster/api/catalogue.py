"""The catalogue and the resources that fill it.

:class:`Catalogue` is what the controllers keep for a whole cluster beside replica
info: its topics, consumer groups and broker groups (the endpoint routes advertise
for each, and whether it takes writes). Brokers serve from it, so a topic added, a
group scaled out or a group write-disabled for a drain reaches every broker without
a restart.

RocketTopic and RocketConsumerGroup (``rocketcluster.io/v1alpha1``) are topics and
consumer groups managed as custom resources (GitOps), beside ``spec.topics`` and
``spec.consumerGroups`` of a RocketCluster; the operator puts both into the
catalogue."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rocketcluster.api.cluster import ObjectMeta
from rocketcluster.api.status import CatalogueStatus
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec, TraceMode

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Topics and consumer groups one POST /v1/catalogue/entries may carry.
MAX_BATCH_ENTRIES = 1000


def canonical_spec(spec: TopicSpec | ConsumerGroupSpec) -> dict[str, Any]:
    """A spec as the catalogue stores it (unset optional limits left out): what a
    writer compares the catalogue with to find what differs."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


class BrokerGroupEntry(BaseModel):
    """A broker group as routes show it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    endpoint: str = Field(default="", description="host:port that follows the master")
    writable: bool = Field(
        default=True, description="false while the group is drained: routes offer it read-only"
    )


class Catalogue(BaseModel):
    """The cluster's catalogue; ``version`` rises with every change."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    version: int = 0
    topics: list[TopicSpec] = Field(default_factory=list)
    consumer_groups: list[ConsumerGroupSpec] = Field(default_factory=list, alias="consumerGroups")
    groups: dict[str, BrokerGroupEntry] = Field(default_factory=dict)

    def topic(self, name: str) -> TopicSpec | None:
        return next((t for t in self.topics if t.name == name), None)

    def consumer_group(self, name: str) -> ConsumerGroupSpec | None:
        return next((g for g in self.consumer_groups if g.name == name), None)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RocketTopicSpec(_Spec):
    cluster: str = Field(pattern=_K8S_NAME, description="the RocketCluster, same namespace")
    topic_name: str | None = Field(
        default=None,
        alias="topicName",
        description="the topic's name on the cluster (default: metadata.name); RocketMQ "
        "names may hold capitals, '_' and '%', which Kubernetes names may not",
    )
    queues: int = Field(default=8, ge=1, le=1024, description="queues per broker group")
    message_type: MessageType = Field(default=MessageType.NORMAL, alias="messageType")
    max_message_bytes: int | None = Field(
        default=None,
        ge=1,
        alias="maxMessageBytes",
        description="largest message body (the brokers' maxMessageBytes applies above it)",
    )
    max_produce_rate: float | None = Field(
        default=None, gt=0, alias="maxProduceRate", description="messages/s per broker"
    )
    trace: TraceMode = Field(
        default=TraceMode.SAMPLED,
        description="server-side message traces: all, sampled (the default) or off",
    )


class RocketConsumerGroupSpec(_Spec):
    cluster: str = Field(pattern=_K8S_NAME, description="the RocketCluster, same namespace")
    group_name: str | None = Field(
        default=None,
        alias="groupName",
        description="the name on the cluster (default: metadata.name)",
    )
    fifo: bool = False
    max_delivery_attempts: int = Field(default=16, ge=1, le=1000, alias="maxDeliveryAttempts")


class RocketTopic(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    api_version: Literal["rocketcluster.io/v1alpha1"] = Field(
        default="rocketcluster.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["RocketTopic"] = "RocketTopic"
    metadata: ObjectMeta
    spec: RocketTopicSpec
    status: CatalogueStatus | None = None

    def topic(self) -> TopicSpec:
        """The topic as the catalogue holds it (validates RocketMQ's naming rules)."""
        return TopicSpec(
            name=self.spec.topic_name or self.metadata.name,
            queues=self.spec.queues,
            messageType=self.spec.message_type,
            maxMessageBytes=self.spec.max_message_bytes,
            maxProduceRate=self.spec.max_produce_rate,
            trace=self.spec.trace,
        )


class RocketConsumerGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    api_version: Literal["rocketcluster.io/v1alpha1"] = Field(
        default="rocketcluster.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["RocketConsumerGroup"] = "RocketConsumerGroup"
    metadata: ObjectMeta
    spec: RocketConsumerGroupSpec
    status: CatalogueStatus | None = None

    def consumer_group(self) -> ConsumerGroupSpec:
        return ConsumerGroupSpec(
            name=self.spec.group_name or self.metadata.name,
            fifo=self.spec.fifo,
            maxDeliveryAttempts=self.spec.max_delivery_attempts,
        )
