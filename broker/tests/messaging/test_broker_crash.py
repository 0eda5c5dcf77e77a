"""kill -9 of the broker with messages in flight: after the restart nothing
acknowledged is lost, and what was in flight is delivered again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rocketcluster.ctl.testing import LocalBroker, local_broker

from .conftest import message, producer, proto_cluster, simple_consumer


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill_dash_nine_with_messages_in_flight(tmp_path: Path, flush: str) -> None:
    cluster = proto_cluster("crash")
    spec = cluster.spec.model_copy(
        update={"brokers": cluster.spec.brokers.model_copy(update={"flush": flush})}
    )
    cluster = cluster.model_copy(update={"spec": spec})
    with local_broker(cluster, tmp_path / "b") as broker:
        _run(broker)


def _run(broker: LocalBroker) -> None:
    with producer(broker, "survivor") as p:
        acked = [p.send(message("survivor", f"m{i}".encode())).message_id for i in range(60)]
    consumed: set[str] = set()
    with simple_consumer(broker, "g-survivor", "survivor") as c:
        in_flight: set[str] = set()
        deadline = time.monotonic() + 30
        while len(consumed) + len(in_flight) < 40 and time.monotonic() < deadline:
            for m in c.receive(16, 300):  # 5 minutes invisible: only a redelivery brings them back
                if len(consumed) < 20:
                    c.ack(m)
                    consumed.add(m.message_id)
                else:
                    in_flight.add(m.message_id)
        assert len(consumed) == 20 and len(in_flight) >= 20
        time.sleep(0.5)  # consume state is persisted every 100 ms in tests
    broker.kill()
    broker.restart()
    redelivered: dict[str, int] = {}
    with simple_consumer(broker, "g-survivor", "survivor") as c:
        deadline = time.monotonic() + 60
        while len(redelivered) < 40 and time.monotonic() < deadline:
            for m in c.receive(32, 30):
                redelivered[m.message_id] = m.delivery_attempt
                c.ack(m)
        assert c.receive(32, 3) == []
    assert set(redelivered) | consumed == set(acked)  # nothing acknowledged lost
    assert not consumed & set(redelivered)  # acked ones are not delivered again
    assert all(redelivered[mid] >= 2 for mid in in_flight)  # in flight: delivered again
