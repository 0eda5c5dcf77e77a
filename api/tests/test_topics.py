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
