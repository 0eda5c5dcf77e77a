"""Stats snapshots on a real broker process (``rocketctl local``'s runtime) publishing
every 0.5 s: they appear in the stats topic, decode, say what was sent and read, come
back through the admin API and the AdminClient, and leave routes and topics usable."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.client.admin import AdminClient, AdminError, StoredSnapshot
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.stats import STATS_TOPIC
from rocketcluster.broker.messaging.trace import TRACE_TOPIC
from rocketcluster.ctl.testing import LocalBroker, local_broker, wait_for

META = (("x-mq-client-id", "stats-test-client"),)
TOPIC = "orders"
IDLE = "idle"  # written, never read
GROUP = "readers"


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "stats"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "sync"},
                "topics": [{"name": TOPIC, "queues": 2}, {"name": IDLE, "queues": 1}],
                "consumerGroups": [{"name": GROUP}],
            },
        }
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    directory = tmp_path_factory.mktemp("stats-broker")
    with local_broker(_cluster(), directory, {"stats_interval_seconds": 0.5}) as handle:
        yield handle


@pytest.fixture(scope="module")
def admin(broker: LocalBroker) -> Iterator[AdminClient]:
    with broker.admin() as client:
        yield client


@pytest.fixture(scope="module")
def stub(broker: LocalBroker) -> Iterator[MessagingServiceStub]:
    channel = grpc.insecure_channel(broker.endpoints)
    try:
        yield MessagingServiceStub(channel)
    finally:
        channel.close()


def _send(stub: MessagingServiceStub, count: int, topic: str = TOPIC) -> None:
    messages = [
        pb.Message(
            topic=pb.Resource(name=topic),
            system_properties=pb.SystemProperties(message_id=uuid.uuid4().hex.upper()),
            body=b"stats" * 40,
        )
        for _ in range(count)
    ]
    reply = stub.SendMessage(spb.SendMessageRequest(messages=messages), metadata=META, timeout=10)
    assert reply.status.code == pb.Code.OK, reply.status


def _receive(stub: MessagingServiceStub) -> int:
    """One receive of up to 32 messages (the broker pops from every queue)."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
        batch_size=32,
    )
    request.invisible_duration.FromMilliseconds(60_000)
    request.long_polling_timeout.FromMilliseconds(0)
    replies = stub.ReceiveMessage(request, metadata=META, timeout=10)
    return sum(1 for r in replies if r.WhichOneof("content") == "message")


def _all(admin: AdminClient) -> list[StoredSnapshot]:
    return list(admin.iter_stats_snapshots(0, page_size=50))


def test_snapshots_appear_and_tell_what_was_sent_and_read(
    admin: AdminClient, stub: MessagingServiceStub
) -> None:
    _send(stub, 20)
    _send(stub, 5, IDLE)
    assert _receive(stub) == 20
    started = int(time.time() * 1000)

    def seen() -> StoredSnapshot | None:
        for stored in reversed(_all(admin)):
            if stored.snapshot.time >= started:
                return stored
        return None

    stored = wait_for(seen, timeout=60, what="a snapshot taken after the sends and reads")
    snapshot = stored.snapshot
    assert (snapshot.cluster, snapshot.broker_group) == ("stats", "stats-broker-0")
    queues = {(q.topic, q.queue_id): q for q in snapshot.queues}
    assert set(queues) == {(TOPIC, 0), (TOPIC, 1), (IDLE, 0)}  # nothing of the broker's own
    assert [queues[(TOPIC, q)].max_offset for q in (0, 1)] == [10, 10]
    assert queues[(IDLE, 0)].max_offset == 5
    assert queues[(IDLE, 0)].last_read_time is None
    for qid in (0, 1):
        queue = queues[(TOPIC, qid)]
        assert queue.last_read_time is not None and queue.last_read_time <= started
        assert queue.head_store_time is not None and queue.tail_store_time is not None
        assert queue.head_store_time <= queue.tail_store_time
        (consumer,) = [
            c for c in snapshot.consumers if (c.consumer_group, c.queue_id) == (GROUP, qid)
        ]
        assert (consumer.committed_offset, consumer.inflight, consumer.retry) == (0, 10, 0)
        assert consumer.committed_store_time == queue.head_store_time
    segments = [s for s in snapshot.segments if s.topic == TOPIC]
    assert sum(s.messages for s in segments) == 20
    assert all(s.last_read_time is not None for s in segments)
    assert sum(s.messages for s in snapshot.segments if s.topic == IDLE) == 5


def test_the_stats_topic_is_there_and_leaves_routes_alone(
    admin: AdminClient, stub: MessagingServiceStub
) -> None:
    wait_for(lambda: _all(admin), timeout=60, what="a first snapshot")
    topic = admin.topic(STATS_TOPIC)
    assert topic["queues"] == 1 and topic["queueOffsets"][0]["maxOffset"] >= 1
    # (and the trace topic once a sampled message was traced: 1 in 100 ids)
    assert {t["name"] for t in admin.topics()} - {TRACE_TOPIC} == {TOPIC, IDLE, STATS_TOPIC}
    for name in (TOPIC, STATS_TOPIC):  # both route; a user topic keeps its queues
        reply = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=name)), metadata=META, timeout=10
        )
        assert reply.status.code == pb.Code.OK, reply.status
        assert len(reply.message_queues) == (2 if name == TOPIC else 1)
    _send(stub, 1)  # sends go on
    status = admin.stats()["statsSnapshots"]
    assert (status["intervalSeconds"], status["failure"]) == (0.5, None)
    assert status["last"]["messages"] == 1 and status["last"]["rows"] > 0


def test_a_page_may_hold_only_some_rows(broker: LocalBroker, admin: AdminClient) -> None:
    wait_for(lambda: len(_all(admin)) >= 2, timeout=60, what="two snapshots")
    url = f"http://{broker.admin_address}/v1/stats/snapshots"
    whole = httpx.get(url, params={"limit": 2}, timeout=10).json()["snapshots"]
    some = httpx.get(url, params={"limit": 2, "rows": "queues,consumers"}, timeout=10).json()
    for full, part in zip(whole, some["snapshots"], strict=True):
        assert "segments" in full["snapshot"] and "segments" not in part["snapshot"]
        assert part["snapshot"]["queues"] == full["snapshot"]["queues"]
        assert part["snapshot"]["consumers"] == full["snapshot"]["consumers"]
        assert part["offset"] == full["offset"]


def test_pages_and_time_lookups_through_the_admin_client(admin: AdminClient) -> None:
    wait_for(lambda: len(_all(admin)) >= 4, timeout=60, what="four snapshots")
    everything = _all(admin)
    offsets = [s.offset for s in everything]
    assert offsets == list(range(len(offsets)))  # one message per snapshot, none skipped
    first = admin.stats_snapshots(0, 2)
    assert [s.offset for s in first.snapshots] == [0, 1]
    assert (first.next_offset, first.skipped, first.min_offset) == (2, 0, 0)
    assert first.max_offset >= len(offsets)
    times = [s.store_time for s in everything]
    assert times == sorted(times) and len(set(times)) == len(times)  # 0.5 s apart
    third, fourth = everything[2], everything[3]
    assert admin.stats_offset(third.store_time) == third.offset
    assert admin.stats_offset(third.store_time + 1) == fourth.offset
    assert admin.stats_offset(0) == 0
    end = admin.stats_snapshots(0, 1).max_offset
    assert admin.stats_offset(int(time.time() * 1000) + 3_600_000) >= end


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/v1/stats/snapshots", {"fromOffset": -1}, "fromOffset"),
        ("/v1/stats/snapshots", {"limit": 0}, "limit"),
        ("/v1/stats/snapshots", {"limit": 5000}, "limit"),
        ("/v1/stats/snapshots", {"fromOffset": "soon"}, "fromOffset"),
        ("/v1/stats/snapshots", {"rows": "queues,brokers"}, "brokers"),
        ("/v1/stats/offset", {}, "time"),
        ("/v1/stats/offset", {"time": "yesterday"}, "time"),
        ("/v1/stats/offset", {"time": -5}, "time"),
    ],
)
def test_bad_query_parameters_get_a_4xx_naming_them(
    broker: LocalBroker, path: str, params: dict[str, object], named: str
) -> None:
    answer = httpx.get(f"http://{broker.admin_address}{path}", params=params, timeout=10)  # type: ignore[arg-type]
    assert 400 <= answer.status_code < 500, answer.text
    assert named in answer.text


def test_the_admin_client_reports_a_refused_page(admin: AdminClient) -> None:
    with pytest.raises(AdminError) as refused:
        admin.stats_snapshots(0, 0)
    assert refused.value.status == 422 and "limit" in refused.value.detail
