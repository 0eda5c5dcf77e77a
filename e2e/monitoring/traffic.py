"""Consumers with the official client for the monitored cluster: one group that
acknowledges what it receives (the delivery counters, lag, in-flight, RPC latencies)
and one that never does, so its messages exhaust their delivery attempts and the
broker moves them to the group's dead-letter queue (the DLQ counter and alert)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression

from rocketcluster.ctl.workload import TOPIC

# The broker's shortest invisible duration is 1 s; a never-acknowledged message is
# dead-lettered by the first receive after it (maxDeliveryAttempts 1).
NEVER_ACK_INVISIBLE_S = 2


@dataclass
class Consumers:
    endpoints: str
    acking_group: str
    never_acking_group: str
    received: dict[str, int] = field(default_factory=dict)  # group -> messages
    errors: dict[str, int] = field(default_factory=dict)  # first line of error -> count
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        # The never-acking group takes one message per receive: a trickle into the
        # DLQ, not a second copy of the whole topic.
        for group, batch, ack in (
            (self.acking_group, 32, True),
            (self.never_acking_group, 1, False),
        ):
            t = threading.Thread(target=self._run, args=(group, batch, ack), daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def _run(self, group: str, batch: int, ack: bool) -> None:
        consumer = SimpleConsumer(
            ClientConfiguration(self.endpoints, Credentials(), request_timeout=5),
            group,
            {TOPIC: FilterExpression()},
            await_duration=2,
        )
        consumer.startup()
        try:
            while not self._stop.is_set():
                try:
                    messages = consumer.receive(batch, 30 if ack else NEVER_ACK_INVISIBLE_S)
                    self.received[group] = self.received.get(group, 0) + len(messages)
                    if ack:
                        for msg in messages:
                            consumer.ack(msg)
                    else:
                        self._stop.wait(NEVER_ACK_INVISIBLE_S)
                except Exception as exc:  # counted: a stopped slave makes some fail
                    text = f"{group}: {str(exc).splitlines()[0][:120] if str(exc) else exc!r}"
                    self.errors[text] = self.errors.get(text, 0) + 1
                    time.sleep(0.5)
        finally:
            consumer.shutdown()
