"""Message traces with the official Python client, in both shapes of a broker (one
process; a store process behind two fronts, which relay the client id and address):
a message's life read back from GET /v1/messages/{id}/trace."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from rocketcluster.api.client.admin import AdminError
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client, wait_for

from .conftest import BROKER_SHAPES, message, producer, simple_consumer

TOPICS = [
    {"name": "traced", "queues": 2, "trace": "all"},
    {"name": "traced-dlq", "queues": 1, "trace": "all"},
    {"name": "untraced", "queues": 1, "trace": "off"},
]
GROUPS = [{"name": "g-trace"}, {"name": "g-trace-dlq", "maxDeliveryAttempts": 2}, {"name": "g-off"}]


@pytest.fixture(scope="module", params=list(BROKER_SHAPES.values()), ids=list(BROKER_SHAPES))
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBroker]:
    quiet_official_client()
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "traces"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "frontProcesses": request.param},
                "topics": TOPICS,
                "consumerGroups": GROUPS,
            },
        }
    )
    with local_broker(cluster, tmp_path_factory.mktemp("traces")) as handle:
        yield handle


def _events(broker: LocalBroker, message_id: str, *, until: list[str]) -> list[dict[str, Any]]:
    """The message's events once their types begin with ``until`` (appended ~50 ms
    after they happen)."""

    def probe() -> list[dict[str, Any]] | None:
        with broker.admin() as admin:
            try:
                events: list[dict[str, Any]] = admin.message_trace(message_id)["events"]
            except AdminError as exc:
                if exc.status == 404:
                    return None
                raise
        return events if [e["type"] for e in events][: len(until)] == until else None

    return wait_for(probe, timeout=30, what=f"trace events {until} of {message_id}")


def test_sent_stored_delivered_acked(broker: LocalBroker) -> None:
    with producer(broker, "traced") as p:
        message_id = p.send(message("traced", b"traced body")).message_id
    with simple_consumer(broker, "g-trace", "traced") as c:
        got = wait_for(lambda: c.receive(1, 10), what="the message")
        assert got[0].message_id == message_id
        c.ack(got[0])
    events = _events(broker, message_id, until=["sent", "stored", "delivered", "acked"])
    assert len(events) == 4
    sent, stored, delivered, acked = events
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    with broker.admin() as admin:
        me = admin.broker()
    assert {(e["broker"], e["group"]) for e in events} == {
        (f"{me['group']}-{me['brokerId']}", me["group"])
    }
    assert sent["clientId"] and sent["clientId"] != delivered["clientId"]
    assert sent["clientAddress"].startswith(("ipv4:127.0.0.1:", "ipv6:"))
    assert sent["bornTimestamp"] <= stored["storeTimestamp"] + 1000
    assert stored["topic"] == "traced" and stored["replication"] == "none"
    assert delivered["consumerGroup"] == "g-trace" and delivered["attempt"] == 1
    assert delivered["invisibleUntil"] > delivered["time"]
    assert acked["consumerGroup"] == "g-trace"
    assert (acked["queueId"], acked["queueOffset"]) == (stored["queueId"], stored["queueOffset"])
    with broker.admin() as admin:
        assert admin.message_trace(message_id)["traced"] is True


def test_expired_redelivered_then_dead_lettered(broker: LocalBroker) -> None:
    with producer(broker, "traced-dlq") as p:
        message_id = p.send(message("traced-dlq", b"poison")).message_id
    with simple_consumer(broker, "g-trace-dlq", "traced-dlq") as c:
        attempts: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(attempts) < 2:
            for m in c.receive(1, 1):  # never acked: invisible for 1 s, then back
                attempts.append(m.delivery_attempt)
        assert attempts == [1, 2]
    kinds = ["sent", "stored", "delivered", "expired", "delivered", "expired", "dead-lettered"]
    events = _events(broker, message_id, until=kinds)
    first, second = events[2], events[4]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert events[3]["time"] == first["invisibleUntil"]
    assert events[3]["reason"] == "invisibility"
    assert events[6]["dlqTopic"] == "%DLQ%g-trace-dlq" and events[6]["attempts"] == 2


def test_trace_off_records_nothing(broker: LocalBroker) -> None:
    with producer(broker, "untraced") as p:
        message_id = p.send(message("untraced", b"quiet")).message_id
    with simple_consumer(broker, "g-off", "untraced") as c:
        got = wait_for(lambda: c.receive(1, 10), what="the message")
        c.ack(got[0])
    time.sleep(0.3)  # what would have been traced is appended by now
    with broker.admin() as admin:
        assert admin.message_trace(message_id) == {
            "messageId": message_id,
            "events": [],
            "traced": False,
        }
        with pytest.raises(AdminError) as missing:
            admin.message_trace("0123456789ABCDEF0123456789ABCDEF")
        assert missing.value.status == 404
