"""Topic and consumer group declarations, as written in a RocketCluster manifest."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rocketcluster.api.names import group_name_problem, topic_name_problem


class MessageType(StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


class TraceMode(StrEnum):
    """Which messages of a topic the brokers trace (docs/architecture.md §6.8)."""

    ALL = "all"
    SAMPLED = "sampled"
    OFF = "off"


class TopicSpec(BaseModel):
    """``spec.topics[]``: a topic with its queue count and accepted message type."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str
    queues: int = Field(default=8, ge=1, le=1024)
    message_type: MessageType = Field(default=MessageType.NORMAL, alias="messageType")
    max_message_bytes: int | None = Field(
        default=None,
        ge=1,
        alias="maxMessageBytes",
        description=(
            "largest message body this topic accepts (at most brokers.maxMessageBytes, "
            "which applies when unset); larger ones get MESSAGE_BODY_TOO_LARGE"
        ),
    )
    max_produce_rate: float | None = Field(
        default=None,
        gt=0,
        alias="maxProduceRate",
        description=(
            "messages per second each broker accepts for this topic (a token bucket "
            "with one second of burst); more get TOO_MANY_REQUESTS; unset: unlimited"
        ),
    )
    # Left out of a dump at its default: catalogues, metadata and rendered configs stay
    # what a broker of the previous release (which forbids unknown fields) reads.
    trace: TraceMode = Field(
        default=TraceMode.SAMPLED,
        alias="trace",
        exclude_if=lambda v: v == TraceMode.SAMPLED,
        description=(
            "server-side message traces (sent, stored, replicated, delivered, acked, "
            "expired, dead-lettered) kept in the brokers' RMQ_SYS_TRACE_DATA topic: all "
            "messages, sampled (one message id in the brokers' traceSampleEvery, 100 by "
            "default, every event of it or none) or off"
        ),
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        problem = topic_name_problem(value)
        if problem:
            raise ValueError(f"topic {value!r}: {problem}")
        return value


class ConsumerGroupSpec(BaseModel):
    """``spec.consumerGroups[]``: a consumer group and its delivery policy."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str
    fifo: bool = False
    max_delivery_attempts: int = Field(default=16, ge=1, le=1000, alias="maxDeliveryAttempts")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        problem = group_name_problem(value)
        if problem:
            raise ValueError(f"consumer group {value!r}: {problem}")
        return value
