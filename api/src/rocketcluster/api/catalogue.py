"""RocketTopic and RocketConsumerGroup (``rocketcluster.io/v1alpha1``): topics and
consumer groups managed as custom resources (GitOps), beside ``spec.topics`` and
``spec.consumerGroups`` of a RocketCluster. The operator puts them into the
controllers' catalogue, from which every broker group serves them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rocketcluster.api.cluster import ObjectMeta
from rocketcluster.api.status import CatalogueStatus
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


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
