from __future__ import annotations

import pytest
from pydantic import ValidationError

from rocketcluster.api import ConsumerGroupSpec, MessageType, TopicSpec, dlq_topic, retry_topic


def test_manifest_spelling_is_camel_case() -> None:
    spec = TopicSpec.model_validate({"name": "orders", "queues": 4, "messageType": "FIFO"})
    assert spec.message_type is MessageType.FIFO
    assert spec.model_dump(by_alias=True)["messageType"] == "FIFO"
    group = ConsumerGroupSpec.model_validate({"name": "g", "maxDeliveryAttempts": 5})
    assert group.max_delivery_attempts == 5 and not group.fifo


@pytest.mark.parametrize(
    "bad",
    [
        {"name": ""},
        {"name": "has space"},
        {"name": "t" * 128},
        {"name": "ok", "queues": 0},
        {"name": "ok", "messageType": "WEIRD"},
        {"name": "ok", "unknown": 1},
    ],
)
def test_bad_topics_are_refused_with_a_reason(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TopicSpec.model_validate(bad)


def test_system_topic_names() -> None:
    assert dlq_topic("g1") == "%DLQ%g1"
    assert retry_topic("g1") == "%RETRY%g1"
    TopicSpec(name=dlq_topic("g1"))  # system names are valid topic names


def test_a_topic_limit_above_the_brokers_is_refused() -> None:
    from rocketcluster.api.cluster import RocketCluster

    def cluster(topic_max: int) -> RocketCluster:
        return RocketCluster.model_validate(
            {
                "metadata": {"name": "c"},
                "spec": {
                    "controller": {"replicas": 0},
                    "brokers": {"maxMessageBytes": 1000},
                    "topics": [{"name": "t", "maxMessageBytes": topic_max}],
                },
            }
        )

    assert cluster(1000).spec.topics[0].max_message_bytes == 1000
    with pytest.raises(ValidationError, match=r"t \(1001\)"):
        cluster(1001)
    with pytest.raises(ValidationError):
        TopicSpec.model_validate({"name": "t", "maxProduceRate": 0})


def test_a_groups_retry_and_dead_letter_topics_are_valid_topics() -> None:
    longest = "g" * 120
    ConsumerGroupSpec(name=longest)
    TopicSpec(name=dlq_topic(longest))
    TopicSpec(name=retry_topic(longest))
    with pytest.raises(ValidationError, match="longer than 120 bytes"):
        ConsumerGroupSpec(name=longest + "g")


def test_names_with_a_trailing_newline_are_refused() -> None:
    with pytest.raises(ValidationError):
        TopicSpec(name="orders\n")
    with pytest.raises(ValidationError):
        ConsumerGroupSpec(name="billing\n")
