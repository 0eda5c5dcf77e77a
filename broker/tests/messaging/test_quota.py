"""ProduceQuota on a logical clock: a topic's bucket holds one second of messages,
refills at its rate, follows a changed limit, and leaves other topics alone."""

from __future__ import annotations

import pytest

from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.quota import ProduceQuota


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admitted(quota: ProduceQuota, topic: TopicSpec, count: int) -> int:
    passed = 0
    for _ in range(count):
        try:
            quota.admit(topic)
            passed += 1
        except MessagingError as exc:
            assert exc.code == Code.TOO_MANY_REQUESTS
            assert topic.name in exc.message and "maxProduceRate" in exc.message
    return passed


def test_a_bucket_holds_one_second_and_refills_at_the_rate() -> None:
    clock = Clock()
    quota = ProduceQuota(clock)
    topic = TopicSpec(name="t", maxProduceRate=10)
    assert admitted(quota, topic, 25) == 10
    clock.now += 0.5
    assert admitted(quota, topic, 25) == 5
    clock.now += 60  # idle: never more than the burst
    assert admitted(quota, topic, 25) == 10


def test_slow_rates_still_pass_one_message() -> None:
    clock = Clock()
    quota = ProduceQuota(clock)
    topic = TopicSpec(name="t", maxProduceRate=0.5)
    assert admitted(quota, topic, 3) == 1
    clock.now += 1.0
    assert admitted(quota, topic, 1) == 0
    clock.now += 1.0
    assert admitted(quota, topic, 1) == 1


def test_topics_are_apart_and_a_changed_limit_applies() -> None:
    clock = Clock()
    quota = ProduceQuota(clock)
    limited = TopicSpec(name="limited", maxProduceRate=2)
    assert admitted(quota, limited, 5) == 2
    assert admitted(quota, TopicSpec(name="free"), 100) == 100
    assert admitted(quota, TopicSpec(name="other", maxProduceRate=2), 5) == 2
    raised = limited.model_copy(update={"max_produce_rate": 5.0})
    assert admitted(quota, raised, 10) == 5


@pytest.mark.parametrize("rate", [0, -1])
def test_a_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ValueError):
        TopicSpec(name="t", maxProduceRate=rate)
