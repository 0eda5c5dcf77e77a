"""The admin endpoints the web console reads and writes, on a real broker of each
shape (one process; a store process behind two fronts): browsing a queue by offset
and a topic by time, whole bodies, a test message the official consumer receives,
a group's dead letters listed and resent to that group only, a group's status, and
bad input refused with a 4xx that says why."""

from __future__ import annotations

import base64
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client, wait_for

pytestmark = pytest.mark.slow

BIG = 4 * 1024 * 1024  # the brokers' maxMessageBytes (the default)
# One process serving the client port, and a store process behind two fronts.
BROKER_SHAPES = {"single-process": 0, "two-fronts": 2}


def _cluster(front_processes: int) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "console"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {
                    "groups": 1,
                    "replicas": 1,
                    "flush": "sync",
                    "maxMessageBytes": BIG,
                    "frontProcesses": front_processes,
                },
                "topics": [
                    {"name": "browse", "queues": 2},
                    {"name": "timed", "queues": 2},
                    {"name": "bodies", "queues": 1},
                    {"name": "sendable", "queues": 2},
                    {"name": "small", "queues": 1, "maxMessageBytes": 1024},
                    {"name": "ordered", "queues": 1, "messageType": "FIFO"},
                    {"name": "dead", "queues": 1},
                ],
                "consumerGroups": [
                    {"name": "g-send"},
                    {"name": "g-dead", "maxDeliveryAttempts": 2},
                    {"name": "g-other"},
                    {"name": "g-clean"},
                ],
            },
        }
    )


@pytest.fixture(scope="module", params=list(BROKER_SHAPES.values()), ids=list(BROKER_SHAPES))
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBroker]:
    quiet_official_client()
    directory = Path(tmp_path_factory.mktemp("console"))
    with local_broker(_cluster(request.param), directory) as handle:
        yield handle


@pytest.fixture
def http(broker: LocalBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=30) as client:
        yield client


def _ok(answer: httpx.Response, status: int = 200) -> Any:
    assert answer.status_code == status, (answer.status_code, answer.text)
    return answer.json()


def _send(http: httpx.Client, topic: str, **fields: Any) -> dict[str, Any]:
    result: dict[str, Any] = _ok(http.post(f"/v1/topics/{topic}/messages", json=fields), 201)
    return result


def _refused(answer: httpx.Response, status: int, *words: str) -> None:
    assert answer.status_code == status, (answer.status_code, answer.text)
    detail = str(answer.json()["detail"])
    for word in words:
        assert word in detail, (word, detail)


def _config(broker: LocalBroker) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoints, Credentials(), request_timeout=10)


@contextlib.contextmanager
def _consumer(
    broker: LocalBroker, group: str, topic: str, await_duration: int = 3
) -> Iterator[SimpleConsumer]:
    consumer = SimpleConsumer(
        _config(broker), group, {topic: FilterExpression()}, await_duration=await_duration
    )
    consumer.startup()
    try:
        yield consumer
    finally:
        consumer.shutdown()


def _receive(consumer: SimpleConsumer, want: int, timeout: float = 30) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.receive(32, 10)
    return got


# -- browsing ----------------------------------------------------------------------


def test_a_queue_a_page_at_a_time(http: httpx.Client) -> None:
    sent = [_send(http, "browse", body=f"m{i}", queueId=0) for i in range(25)]
    assert [s["queueOffset"] for s in sent] == list(range(25))
    assert {s["queueId"] for s in sent} == {0}
    page = _ok(http.get("/v1/topics/browse/queues/0/messages", params={"from": 0, "limit": 10}))
    assert page["minOffset"] == 0 and page["maxOffset"] == 25 and page["nextOffset"] == 10
    assert [m["bodyText"] for m in page["messages"]] == [f"m{i}" for i in range(10)]
    assert [m["messageId"] for m in page["messages"]] == [s["messageId"] for s in sent[:10]]
    default = _ok(http.get("/v1/topics/browse/queues/0/messages"))
    assert len(default["messages"]) == 20  # the default limit
    tail = _ok(http.get("/v1/topics/browse/queues/0/messages", params={"from": 20, "limit": 100}))
    assert [m["queueOffset"] for m in tail["messages"]] == [20, 21, 22, 23, 24]
    assert tail["nextOffset"] == 25
    for start in (25, 1000):
        past = _ok(http.get("/v1/topics/browse/queues/0/messages", params={"from": start}))
        assert past["messages"] == [] and past["nextOffset"] == 25
    empty = _ok(http.get("/v1/topics/browse/queues/1/messages"))
    assert empty == {
        "topic": "browse",
        "queueId": 1,
        "minOffset": 0,
        "maxOffset": 0,
        "nextOffset": 0,
        "messages": [],
    }


def test_a_topic_over_a_span_of_store_times(http: httpx.Client) -> None:
    before = _send(http, "timed", body="before", queueId=0)["storeTimestamp"]
    time.sleep(0.05)
    inside = [_send(http, "timed", body=f"in{i}", queueId=i % 2) for i in range(6)]
    time.sleep(0.05)
    after = _send(http, "timed", body="after", queueId=1)["storeTimestamp"]
    start, end = inside[0]["storeTimestamp"], inside[-1]["storeTimestamp"]
    assert before < start and end < after
    span = {"start": start, "end": end}
    answer = _ok(http.get("/v1/topics/timed/messages", params=span))
    assert answer["start"] == start and answer["end"] == end and not answer["truncated"]
    assert [m["bodyText"] for m in answer["messages"]] == [f"in{i}" for i in range(6)]
    assert {m["queueId"] for m in answer["messages"]} == {0, 1}
    stamps = [m["storeTimestamp"] for m in answer["messages"]]
    assert stamps == sorted(stamps)
    first = _ok(http.get("/v1/topics/timed/messages", params={**span, "limit": 4}))
    assert first["truncated"] and [m["bodyText"] for m in first["messages"]] == [
        f"in{i}" for i in range(4)
    ]
    nothing = _ok(http.get("/v1/topics/timed/messages", params={"start": 1, "end": 2}))
    assert nothing["messages"] == [] and not nothing["truncated"]


def test_whole_bodies_and_binary_previews(broker: LocalBroker, http: httpx.Client) -> None:
    big = os.urandom(BIG)  # not UTF-8 (with overwhelming likelihood: checked below)
    producer = Producer(_config(broker), ("bodies",))
    producer.startup()
    try:
        msg = Message()
        msg.topic, msg.body = "bodies", big
        big_id = producer.send(msg).message_id
    finally:
        producer.shutdown()
    found = _ok(http.get(f"/v1/messages/{big_id}"))
    assert len(found) == 1
    view = found[0]
    assert view["bodySize"] == BIG and view["bodyTruncated"] is True
    assert view["bodyText"] is None
    assert base64.b64decode(view["bodyBase64"]) == big[:4096]
    offset = view["queueOffset"]
    answer = http.get(f"/v1/topics/bodies/queues/0/messages/{offset}/body")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"] == (
        f'attachment; filename="bodies-0-{offset}.bin"'
    )
    assert answer.content == big
    binary = b"\xff\xfe\x00raw"
    sent = _send(http, "bodies", bodyBase64=base64.b64encode(binary).decode())
    page = _ok(
        http.get("/v1/topics/bodies/queues/0/messages", params={"from": sent["queueOffset"]})
    )
    small = page["messages"][0]
    assert small["bodyText"] is None and small["bodyTruncated"] is False
    assert base64.b64decode(small["bodyBase64"]) == binary
    body = http.get(f"/v1/topics/bodies/queues/0/messages/{sent['queueOffset']}/body")
    assert body.content == binary
    _refused(http.get("/v1/topics/bodies/queues/0/messages/99/body"), 404, "99")


# -- a test message ------------------------------------------------------------------


def test_a_test_message_reaches_the_official_consumer(
    broker: LocalBroker, http: httpx.Client
) -> None:
    with _consumer(broker, "g-send", "sendable") as consumer:
        sent = _send(
            http,
            "sendable",
            body="hello console",
            tag="greeting",
            keys=["order-7", "user-3"],
            properties={"region": "eu"},
        )
        # the official clients' message id: version 01 and 16 bytes, in hex
        assert len(sent["messageId"]) == 34 and sent["messageId"].startswith("01")
        int(sent["messageId"], 16)
        assert sent["topic"] == "sendable" and sent["queueId"] in (0, 1)
        assert sent["storeTimestamp"] >= time.time() * 1000 - 60_000
        got = _receive(consumer, 1)
        assert [m.message_id for m in got] == [sent["messageId"]]
        msg = got[0]
        assert msg.body == b"hello console" and msg.tag == "greeting"
        assert sorted(msg.keys) == ["order-7", "user-3"]
        assert msg.properties == {"region": "eu"}
        consumer.ack(msg)
    (view,) = _ok(http.get(f"/v1/messages/{sent['messageId']}"))
    assert (view["queueId"], view["queueOffset"]) == (sent["queueId"], sent["queueOffset"])
    assert view["storeTimestamp"] == sent["storeTimestamp"]
    assert view["properties"] == {"region": "eu"}
    system = view["systemProperties"]
    assert system["UNIQ_KEY"] == sent["messageId"] and system["TAGS"] == "greeting"
    assert system["KEYS"] == "order-7 user-3"
    assert view["bornHost"] == "127.0.0.1" and view["storeHost"] is None
    chosen = _send(http, "sendable", body="to queue 1", queueId=1)
    assert chosen["queueId"] == 1


@pytest.mark.parametrize(
    ("path", "fields", "status", "words"),
    [
        ("/v1/topics/nowhere/messages", {"body": "x"}, 404, ["nowhere"]),
        ("/v1/topics/sendable/messages", {"body": "x", "queueId": 2}, 404, ["queue 2"]),
        ("/v1/topics/sendable/messages", {"body": "x", "bodyBase64": "eA=="}, 422, ["exactly one"]),
        ("/v1/topics/sendable/messages", {}, 422, ["exactly one"]),
        ("/v1/topics/sendable/messages", {"bodyBase64": "not base64!"}, 422, ["base64"]),
        ("/v1/topics/sendable/messages", {"body": ""}, 400, ["empty"]),
        ("/v1/topics/small/messages", {"body": "x" * 2000}, 413, ["1024"]),
        ("/v1/topics/sendable/messages", {"body": "x" * (2 << 20)}, 413, []),
        ("/v1/topics/sendable/messages", {"body": "x", "properties": {"UNIQ_KEY": "1"}}, 400, []),
        ("/v1/topics/sendable/messages", {"body": "x", "tag": "a|b"}, 400, ["tag"]),
        ("/v1/topics/ordered/messages", {"body": "x"}, 422, ["FIFO"]),
    ],
)
def test_a_bad_test_message_is_refused(
    http: httpx.Client, path: str, fields: dict[str, Any], status: int, words: list[str]
) -> None:
    answer = http.post(path, json=fields)
    assert answer.status_code == status, (answer.status_code, answer.text)
    detail = (
        str(answer.json()["detail"])
        if answer.headers.get("content-type", "").startswith("application/json")
        else answer.text
    )
    for word in words:
        assert word in detail, (word, detail)


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("/v1/topics/nowhere/queues/0/messages", 404),
        ("/v1/topics/browse/queues/2/messages", 404),
        ("/v1/topics/browse/queues/-1/messages", 422),
        ("/v1/topics/browse/queues/0/messages?from=-1", 422),
        ("/v1/topics/browse/queues/0/messages?limit=0", 422),
        ("/v1/topics/browse/queues/0/messages?limit=101", 422),
        ("/v1/topics/browse/queues/0/messages?from=x", 422),
        ("/v1/topics/timed/messages?start=5&end=4", 400),
        ("/v1/topics/timed/messages?start=1&end=2&limit=201", 422),
        ("/v1/topics/timed/messages?start=1", 422),
        ("/v1/topics/nowhere/messages?start=1&end=2", 404),
        ("/v1/topics/bodies/queues/1/messages/0/body", 404),
        ("/v1/topics/bodies/queues/0/messages/-1/body", 422),
        ("/v1/groups/nobody/dlq", 404),
        ("/v1/groups/g-dead/dlq?limit=101", 422),
        ("/v1/groups/nobody/status", 404),
    ],
)
def test_bad_reads_are_refused(http: httpx.Client, query: str, status: int) -> None:
    answer = http.get(query)
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.json()["detail"]


# -- dead letters --------------------------------------------------------------------


def test_dead_letters_resent_to_their_group_only(broker: LocalBroker, http: httpx.Client) -> None:
    assert _ok(http.get("/v1/groups/g-clean/dlq")) == {
        "group": "g-clean",
        "topic": "%DLQ%g-clean",
        "count": 0,
        "minOffset": 0,
        "maxOffset": 0,
        "nextOffset": 0,
        "messages": [],
    }
    with _consumer(broker, "g-other", "dead") as other:
        sent = _send(http, "dead", body="poison", keys=["p-1"], properties={"kind": "bad"})
        got = _receive(other, 1)
        assert [m.message_id for m in got] == [sent["messageId"]]
        other.ack(got[0])
    with _consumer(broker, "g-dead", "dead") as doomed:
        attempts: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(attempts) < 2:
            # never acked: back after 1 s; the last attempt invisible for 5 s
            for m in doomed.receive(1, 5 if attempts else 1):
                attempts.append(m.delivery_attempt)
        assert attempts == [1, 2]
        status = _ok(http.get("/v1/groups/g-dead/status"))
        assert status["retrying"] == 1  # the second attempt, in flight
        clients = [c for c in status["clients"] if "dead" in c.get("topics", [])]
        assert clients and clients[0]["language"] == "PYTHON"
        assert clients[0]["address"] and abs(clients[0]["lastSeen"] - time.time() * 1000) < 60_000
        dlq = wait_for(
            lambda: (d := _ok(http.get("/v1/groups/g-dead/dlq")))["count"] == 1 and d,
            what="the dead letter",
        )
    assert dlq["topic"] == "%DLQ%g-dead" and dlq["nextOffset"] == dlq["maxOffset"]
    (dead,) = dlq["messages"]
    assert dead["originTopic"] == "dead" and dead["attempts"] == 2
    assert dead["originMessageId"] == dead["messageId"] == sent["messageId"]
    assert dead["bodyText"] == "poison" and dead["properties"] == {"kind": "bad"}
    assert dead["systemProperties"]["__ORIGIN_GROUP"] == "g-dead"

    status = _ok(http.get("/v1/groups/g-dead/status"))
    assert status["group"] == "g-dead" and status["spec"]["maxDeliveryAttempts"] == 2
    assert status["dlq"] == 1 and status["retrying"] == 0
    (row,) = status["queues"]
    assert row["topic"] == "dead" and row["committedOffset"] == row["maxOffset"]
    assert row["oldestUnackedTimestamp"] is None

    answer = _ok(
        http.post(
            "/v1/groups/g-dead/dlq/resend", json={"messageIds": [sent["messageId"], "0" * 34]}
        )
    )
    assert answer["notFound"] == ["0" * 34]
    (resent,) = answer["resent"]
    assert resent["messageId"] == sent["messageId"] and resent["topic"] == "dead"
    assert resent["queueOffset"] == sent["queueOffset"] + 1

    status = _ok(http.get("/v1/groups/g-dead/status"))
    (row,) = status["queues"]
    assert row["oldestUnackedTimestamp"] is not None and row["lag"] == 1
    with _consumer(broker, "g-dead", "dead") as doomed:
        got = _receive(doomed, 1)
        assert [m.message_id for m in got] == [sent["messageId"]]
        again = got[0]
        assert again.delivery_attempt == 1  # its attempts start over
        assert again.body == b"poison" and again.properties == {"kind": "bad"}
        doomed.ack(again)
    with _consumer(broker, "g-other", "dead", await_duration=2) as other:
        assert _receive(other, 1, timeout=5) == []  # another group skips the resent copy
    rows = _ok(http.get("/v1/groups/g-other/offsets"))
    assert [(r["topic"], r["committedOffset"], r["lag"]) for r in rows] == [
        ("dead", resent["queueOffset"] + 1, 0)
    ]
    assert _ok(http.get("/v1/groups/g-dead/status"))["queues"][0]["lag"] == 0

    # every dead letter at once: the same one again, a second copy on the topic
    everything = _ok(http.post("/v1/groups/g-dead/dlq/resend", json={"all": True}))
    assert [r["queueOffset"] for r in everything["resent"]] == [resent["queueOffset"] + 1]
    assert everything["notFound"] == []


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/groups/nobody/dlq/resend", {"all": True}, 404),
        ("/v1/groups/g-dead/dlq/resend", {"all": True, "messageIds": ["a"]}, 422),
        ("/v1/groups/g-dead/dlq/resend", {}, 422),
        ("/v1/groups/g-dead/dlq/resend", {"all": False}, 422),
        ("/v1/groups/g-dead/dlq/resend", {"messageIds": []}, 422),
        ("/v1/groups/g-dead/dlq/resend", {"messageIds": [f"{i}" for i in range(1001)]}, 422),
        ("/v1/groups/g-dead/dlq/resend", {"messageIds": ["bad\u0001id"]}, 422),
    ],
)
def test_bad_resends_are_refused(
    http: httpx.Client, path: str, body: dict[str, Any], status: int
) -> None:
    answer = http.post(path, json=body)
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.json()["detail"]
