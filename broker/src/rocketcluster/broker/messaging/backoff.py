"""The retry policy a consumer group's clients are told in their settings: RocketMQ's
delay levels (1 s to 2 h) for normal messages; FIFO messages retry after 1 s, since
the queue waits for them."""

from __future__ import annotations

from typing import Final

from rocketmq.grpc_protocol import definition_pb2 as pb

CUSTOMIZED_BACKOFF_S: Final = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)


def backoff_policy(max_attempts: int, fifo: bool) -> pb.RetryPolicy:
    delays = (1,) if fifo else CUSTOMIZED_BACKOFF_S
    policy = pb.RetryPolicy(max_attempts=max_attempts)
    for seconds in delays:
        policy.customized_backoff.next.add(seconds=seconds)
    return policy
