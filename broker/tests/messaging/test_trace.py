"""Message traces (messaging/trace.py): the recorder alone (sampling, the bounded
buffer, batching), then a broker's runtime in this process recording a message's
life — send, POP, ack, expiry, dead letter — into RMQ_SYS_TRACE_DATA, read back by
the admin API."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import Catalogue, RocketTopic, canonical_spec
from rocketcluster.api.topics import TopicSpec, TraceMode
from rocketcluster.broker.admin.app import create_admin_app
from rocketcluster.broker.messaging.filters import FilterCache
from rocketcluster.broker.messaging.revive import revive_due
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.messaging.service import MessagingServicer
from rocketcluster.broker.messaging.trace import (
    TRACE_TOPIC,
    TraceRecorder,
    message_id_of,
    sampled,
)
from rocketcluster.broker.metrics import BrokerMetrics
from rocketcluster.broker.store import MessageStore, MessageToStore, PutResult, PutStatus
from rocketcluster.ctl.testing import small_store_config

TOPICS = {
    "all": TopicSpec(name="all", trace=TraceMode.ALL),
    "some": TopicSpec(name="some"),
    "none": TopicSpec(name="none", trace=TraceMode.OFF),
    "%DLQ%g": TopicSpec(name="%DLQ%g", trace=TraceMode.ALL),
}


def recorder(capacity: int = 100, every: int = 4) -> TraceRecorder:
    return TraceRecorder(
        TOPICS.get, lambda: ("g0-0", "g0"), sample_every=every, capacity=capacity, interval_s=0.01
    )


class Writes:
    """A write function that keeps what it was given."""

    def __init__(self, status: PutStatus = PutStatus.PUT_OK) -> None:
        self.calls: list[list[MessageToStore]] = []
        self.status = status

    async def __call__(self, records: Sequence[MessageToStore]) -> PutResult:
        self.calls.append(list(records))
        return PutResult(self.status)


# -- the recorder alone -------------------------------------------------------------


def test_sampling_is_a_stable_hash_of_the_id() -> None:
    ids = [f"ID{i:05d}" for i in range(2000)]
    picked = [i for i in ids if sampled(i, 10)]
    assert picked == [i for i in ids if zlib.crc32(i.encode()) % 10 == 0]
    assert 120 < len(picked) < 280  # about one in ten
    assert picked == [i for i in ids if sampled(i, 10)]  # the same answer every time
    assert all(sampled(i, 1) for i in ids[:50])


def test_which_messages_are_traced() -> None:
    rec = recorder(every=4)
    ids = [f"M{i}" for i in range(200)]
    assert all(rec.wants("all", i) for i in ids)
    assert not any(rec.wants("none", i) for i in ids)
    assert [i for i in ids if rec.wants("some", i)] == [i for i in ids if sampled(i, 4)]
    # Not topics of their own: the broker's, a group's DLQ, unknown ones; odd ids.
    assert not rec.wants("%DLQ%g", "M1")
    assert not rec.wants(TRACE_TOPIC, "M1")
    assert not rec.wants("unknown", "M1")
    assert not rec.wants("all", "")
    assert not rec.wants("all", "two words")


def test_a_full_buffer_drops_and_counts() -> None:
    rec = recorder(capacity=3)
    for i in range(5):
        rec.record("sent", f"M{i}", {"topic": "all"})
    assert rec.pending() == 3
    assert rec.dropped["full"] == 2
    assert rec.recorded["sent"] == 3
    assert [json.loads(r.body)["messageId"] for r in rec.take()] == ["M0", "M1", "M2"]
    rec.record("sent", "M5", {"topic": "all"})  # room again
    assert rec.pending() == 1


def test_events_are_records_keyed_by_the_message_id() -> None:
    rec = recorder()
    rec.record("stored", "M1", {"topic": "all", "queueId": 3}, at=1234)
    (record,) = rec.take()
    assert record.topic == TRACE_TOPIC and record.queue_id == 0
    assert record.keys == ("M1",) and record.msg_id == ""  # not found as the message
    assert b"KEYS\x01M1\x02" in record.properties
    assert json.loads(record.body) == {
        "type": "stored",
        "time": 1234,
        "broker": "g0-0",
        "group": "g0",
        "messageId": "M1",
        "topic": "all",
        "queueId": 3,
    }


async def test_events_of_a_loop_turn_share_one_append() -> None:
    rec = recorder()
    writes = Writes()
    task = asyncio.get_running_loop().create_task(rec.run(writes))
    try:
        for i in range(3):
            rec.record("sent", f"M{i}", {})
        await asyncio.sleep(0.1)
        assert [len(c) for c in writes.calls] == [3]
        rec.record("acked", "M0", {})
        await asyncio.sleep(0.1)
        assert [len(c) for c in writes.calls] == [3, 1]
        assert rec.written == 4
    finally:
        task.cancel()


async def test_a_batch_is_at_most_max_batch_and_a_refused_append_is_counted() -> None:
    rec = recorder(capacity=3000)
    for i in range(2500):
        rec.record("sent", f"M{i}", {})
    writes = Writes()
    assert await rec.flush(writes) == 2500
    assert [len(c) for c in writes.calls] == [1024, 1024, 452]
    rec.record("sent", "X", {})
    assert await rec.flush(Writes(PutStatus.SERVICE_NOT_AVAILABLE)) == 0
    assert rec.dropped["unstored"] == 1 and rec.pending() == 0


def test_an_ack_is_traced_only_for_a_traced_delivery() -> None:
    rec = recorder()
    rec.delivered("M1", ("g", "all", 0, 5), attempt=1, invisible_until=9, client_id="c")
    rec.acked(("g", "all", 0, 6))  # another message: not traced
    rec.acked(("g", "all", 0, 5))
    rec.acked(("g", "all", 0, 5))  # the same again: once
    assert [(json.loads(r.body)["type"], json.loads(r.body)["messageId"]) for r in rec.take()] == [
        ("delivered", "M1"),
        ("acked", "M1"),
    ]


def test_the_message_id_is_read_from_encoded_properties() -> None:
    from rocketcluster.broker.store.record import StoredMessage, encode_properties

    def stored(props: dict[str, str]) -> StoredMessage:
        return StoredMessage("t", 0, 0, 0, 0, b"x", 0, encode_properties(props), 0, 0, 0, 0)

    assert message_id_of(stored({"UNIQ_KEY": "ABC", "KEYS": "k"})) == "ABC"
    assert message_id_of(stored({"a": "b", "UNIQ_KEY": "ABC"})) == "ABC"
    assert message_id_of(stored({"MY_UNIQ_KEY": "no", "UNIQ_KEY": "ABC"})) == "ABC"
    assert message_id_of(stored({"a": "b"})) == ""


def test_the_catalogue_carries_trace_and_leaves_the_default_out() -> None:
    """What the controllers store and brokers apply (canonical_spec, Catalogue); the
    default is left out, so brokers of the previous release (extra="forbid") read
    catalogues, metadata and configs of topics that keep it."""
    off, default = TopicSpec(name="t", trace=TraceMode.OFF), TopicSpec(name="u")
    assert canonical_spec(off) == {
        "name": "t",
        "queues": 8,
        "messageType": "NORMAL",
        "trace": "off",
    }
    assert "trace" not in canonical_spec(default)
    assert "trace" not in json.loads(default.model_dump_json(by_alias=True))
    catalogue = Catalogue.model_validate({"topics": [canonical_spec(off), canonical_spec(default)]})
    assert [t.trace for t in catalogue.topics] == [TraceMode.OFF, TraceMode.SAMPLED]
    resource = RocketTopic.model_validate(
        {"metadata": {"name": "t"}, "spec": {"cluster": "c", "trace": "all"}}
    )
    assert resource.topic().trace is TraceMode.ALL
    config = BrokerProcessConfig(cluster="c", group="g", data_dir=Path("/d"))
    assert "traceSampleEvery" not in config.model_dump(by_alias=True)
    assert config.trace_sample_every == 100


# -- a broker's runtime in this process ---------------------------------------------


class Context:
    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-mq-client-id", "producer-1"),)

    def time_remaining(self) -> float:
        return 5.0

    def peer(self) -> str:
        return "ipv4:10.1.2.3:40000"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[MessagingRuntime]:
    cfg = BrokerProcessConfig.model_validate(
        {
            "cluster": "c",
            "group": "g0",
            "dataDir": tmp_path,
            "traceSampleEvery": 3,
            "topics": [
                {"name": "orders", "queues": 2, "trace": "all"},
                {"name": "quiet", "queues": 1, "trace": "off"},
                {"name": "sampled", "queues": 1},
            ],
            "consumerGroups": [{"name": "billing", "maxDeliveryAttempts": 2}],
            "messaging": {"minInvisibleMs": 10},
        }
    )
    store = await MessageStore.open(small_store_config(tmp_path / "store"))
    rt = MessagingRuntime(cfg, store, BrokerMetrics("c", cfg.node_id))
    rt.start()
    try:
        yield rt
    finally:
        await rt.stop()
        await store.close()


async def _send(rt: MessagingRuntime, topic: str, message_id: str) -> None:
    request = spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                system_properties=pb.SystemProperties(message_id=message_id),
                body=b"hello",
            )
        ]
    )
    response = await MessagingServicer(rt).SendMessage(request, Context())
    assert response.status.code == 20000, response.status


async def _receive(rt: MessagingRuntime, topic: str, invisible_ms: int = 60_000) -> list[Any]:
    group = rt.registry.require_group("billing")
    return await rt.pop.receive(
        group,
        rt.registry.require_topic(topic),
        -1,
        FilterCache().get("TAG", "*"),
        32,
        invisible_ms,
        auto_renew=False,
        client_id="consumer-7",
        wait_seconds=0.0,
    )


async def _trace(rt: MessagingRuntime, message_id: str) -> httpx.Response:
    await rt.trace.flush(rt.write_traces)
    await rt.store.flush()
    app = create_admin_app(rt, lambda: True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
        return await client.get(f"/v1/messages/{message_id}/trace")


async def test_a_consumed_message_has_its_events_in_order(runtime: MessagingRuntime) -> None:
    rt = runtime
    before = int(time.time() * 1000)
    await _send(rt, "orders", "MSG-1")
    (delivery,) = await _receive(rt, "orders")
    rt.pop.ack("billing", "orders", delivery.handle)
    answer = await _trace(rt, "MSG-1")
    assert answer.status_code == 200, answer.text
    trace = answer.json()
    assert trace["messageId"] == "MSG-1" and trace["traced"] is True
    events = trace["events"]
    assert [e["type"] for e in events] == ["sent", "stored", "delivered", "acked"]
    assert all(e["broker"] == "g0-0" and e["group"] == "g0" for e in events)
    assert all(e["time"] >= before for e in events)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    sent, stored, delivered, acked = events
    assert sent["clientId"] == "producer-1" and sent["clientAddress"] == "ipv4:10.1.2.3:40000"
    assert sent["topic"] == "orders" and "bornTimestamp" in sent
    assert stored["queueId"] == delivery.message.queue_id
    assert stored["queueOffset"] == delivery.message.queue_offset
    assert stored["storeTimestamp"] == delivery.message.store_timestamp
    assert stored["replication"] == "none"  # a standalone broker: no replicated event
    assert delivered["consumerGroup"] == "billing" and delivered["clientId"] == "consumer-7"
    assert delivered["attempt"] == 1
    assert delivered["invisibleUntil"] == delivery.receipt.deadline_ms
    assert acked["consumerGroup"] == "billing"


async def test_an_expiry_then_a_dead_letter(runtime: MessagingRuntime) -> None:
    rt = runtime
    await _send(rt, "orders", "MSG-2")
    (first,) = await _receive(rt, "orders", invisible_ms=20)
    await asyncio.sleep(0.05)
    (second,) = await _receive(rt, "orders", invisible_ms=20)  # attempt 2, the last
    assert second.attempt == 2
    await asyncio.sleep(0.05)
    assert await revive_due(rt.pop) == 1  # the last attempt expired: to %DLQ%billing
    events = (await _trace(rt, "MSG-2")).json()["events"]
    assert [e["type"] for e in events] == [
        "sent",
        "stored",
        "delivered",
        "expired",
        "delivered",
        "expired",
        "dead-lettered",
    ]
    assert events[3]["time"] == first.receipt.deadline_ms  # when the invisibility ran out
    assert events[3]["reason"] == "invisibility" and events[3]["attempt"] == 1
    assert events[4]["attempt"] == 2
    assert events[6]["dlqTopic"] == "%DLQ%billing" and events[6]["attempts"] == 2


async def test_trace_off_and_sampling(runtime: MessagingRuntime) -> None:
    rt = runtime
    await _send(rt, "quiet", "QUIET-1")
    await _receive(rt, "quiet")
    answer = await _trace(rt, "QUIET-1")
    assert answer.status_code == 200
    assert answer.json() == {"messageId": "QUIET-1", "events": [], "traced": False}
    ids = [f"S-{i}" for i in range(12)]
    for message_id in ids:
        await _send(rt, "sampled", message_id)
    for message_id in ids:
        trace = (await _trace(rt, message_id)).json()
        wanted = sampled(message_id, 3)
        assert trace["traced"] is wanted
        assert [e["type"] for e in trace["events"]] == (["sent", "stored"] if wanted else [])
    assert any(sampled(i, 3) for i in ids) and not all(sampled(i, 3) for i in ids)


async def test_an_unknown_message_is_404(runtime: MessagingRuntime) -> None:
    answer = await _trace(runtime, "NOPE")
    assert answer.status_code == 404
    assert "neither message 'NOPE'" in answer.json()["detail"]
    bad = await _trace(runtime, "a%01b")
    assert bad.status_code == 422


async def test_metrics_count_events(runtime: MessagingRuntime) -> None:
    await _send(runtime, "orders", "MSG-3")
    text = runtime.metrics.render().decode()
    assert "rocketcluster_trace_events_total{" in text
    line = next(
        x
        for x in text.splitlines()
        if x.startswith("rocketcluster_trace_events_total") and 'type="sent"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) >= 1
    assert "rocketcluster_trace_events_dropped_total{" in text
