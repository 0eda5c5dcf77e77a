"""ProduceQuota: per-topic produce rate limits (``topics[].maxProduceRate``).

A token bucket per limited topic on each broker: it fills at the topic's rate up to
one second's worth (at least one message) and each accepted message takes a token. An
empty bucket refuses the message with TOO_MANY_REQUESTS, which the official producers
do not retry: the caller learns at once that it produces too fast, and the messages of
other topics (their own buckets, or none) are not held up. Unlimited topics cost one
attribute test per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.codes import Code, MessagingError


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up."""

    __slots__ = ("_clock", "_stamp", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._stamp = clock()

    def take(self) -> bool:
        """Take one token if there is one."""
        now = self._clock()
        tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True


class ProduceQuota:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def admit(self, topic: TopicSpec) -> None:
        """Let one message for ``topic`` through, or raise TOO_MANY_REQUESTS."""
        rate = topic.max_produce_rate
        if rate is None:
            return
        bucket = self._buckets.get(topic.name)
        if bucket is None or bucket.rate != rate:  # new, or the limit changed
            bucket = TokenBucket(rate, max(1.0, rate), self._clock)
            self._buckets[topic.name] = bucket
        if not bucket.take():
            raise MessagingError(
                Code.TOO_MANY_REQUESTS,
                f"topic {topic.name!r} is limited to {rate:g} messages/s on this broker "
                "(maxProduceRate): slow down or raise the topic's limit",
            )
