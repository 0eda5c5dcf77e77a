"""Tiered storage in a real broker process, on a shared directory and on S3 (moto):
the official client produces, local retention deletes what was uploaded, and the
official consumer still gets every message in order from the first offset, with each
read policy. Lookups by key, id and time reach the tier; a backend outage costs the
producer nothing; a restart keeps the tier's state."""

from __future__ import annotations

import contextlib
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
from rocketcluster.e2e.s3server import S3Server

from .conftest import new_bucket

pytestmark = pytest.mark.slow

TOPIC = "history"
POLICIES = ("NOT_IN_DISK", "NOT_IN_MEM", "FORCE", "DISABLE")
COUNT = 400
BODY = 600  # bytes: COUNT messages fill four 64 KiB commit-log segments
# Small segments (64 KiB holds the largest record), so retention has whole segments to
# delete; a tiny retention time, so every segment is old enough once it is uploaded.
OVERRIDES: dict[str, Any] = {
    "segment_size": 64 << 10,
    "max_message_bytes": 8 << 10,
    "retention_hours": 0.0001,
}


def _tiered(backend: str, where: dict[str, Any], policy: str) -> dict[str, Any]:
    return {
        "enabled": True,
        "backend": backend,
        backend: where,
        "readPolicy": policy,
        "uploadBatchBytes": 8192,
        "uploadIntervalSeconds": 0.2,
    }


def _cluster(tiered: dict[str, Any]) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "tiered"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "sync"},
                "topics": [{"name": TOPIC, "queues": 1}],
                "consumerGroups": [{"name": "readers"}, {"name": "late"}],
                "tieredStorage": tiered,
            },
        }
    )


@pytest.fixture(params=["posix", "s3"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[str, Any], S3Server | None]]:
    """(backend, its manifest section, the S3 server when it is S3)."""
    if request.param == "posix":
        yield "posix", {"path": str(tmp_path / "tier")}, None
        return
    server: S3Server = request.getfixturevalue("s3_server")
    # The broker process inherits rocketctl's environment: credentials as on a pod.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    bucket = new_bucket(server)
    yield "s3", {"endpoint": server.endpoint, "bucket": bucket, "prefix": "t"}, server


def _broker(
    tmp_path: Path, backend: tuple[str, dict[str, Any], S3Server | None], policy: str
) -> contextlib.AbstractContextManager[LocalBroker]:
    quiet_official_client()
    name, where, _ = backend
    if name == "posix":
        Path(where["path"]).mkdir(parents=True, exist_ok=True)
    return local_broker(_cluster(_tiered(name, where, policy)), tmp_path / "local", OVERRIDES)


def _produce(endpoints: str, start: int, count: int) -> list[str]:
    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=10), (TOPIC,))
    producer.startup()
    try:
        ids = []
        for i in range(start, start + count):
            msg = Message()
            msg.topic = TOPIC
            msg.body = f"{i:08d}:".encode().ljust(BODY, b".")
            msg.keys = f"order-{i}"
            ids.append(producer.send(msg).message_id)
        return ids
    finally:
        producer.shutdown()


def _consume(endpoints: str, group: str, expected: int, timeout: float = 90) -> list[int]:
    """Sequence numbers in the order the official consumer got them."""
    consumer = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials(), request_timeout=10),
        group,
        {TOPIC: FilterExpression()},
        await_duration=2,
    )
    consumer.startup()
    got: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.receive(32, 30):
                got.append(int(msg.body[:8]))
                consumer.ack(msg)
    finally:
        consumer.shutdown()
    return got


def _admin(broker: LocalBroker, method: str, path: str, **params: Any) -> Any:
    reply = httpx.request(method, f"http://{broker.admin_address}{path}", params=params, timeout=30)
    reply.raise_for_status()
    return reply.json()


def _uploaded(broker: LocalBroker, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        status = _admin(broker, "GET", "/v1/tier")
        return status if status["pendingMessages"] == 0 and status["healthy"] else None

    return wait_for(done, timeout, 0.2, "every message in the tier")


def _retention(broker: LocalBroker) -> dict[str, Any]:
    time.sleep(0.5)  # older than retentionHours (0.36 s) by their last write
    return dict(_admin(broker, "POST", "/v1/store/retention"))


@pytest.mark.parametrize("policy", POLICIES)
def test_every_message_comes_back_in_order_after_local_retention(
    backend: tuple[str, dict[str, Any], S3Server | None], policy: str, tmp_path: Path
) -> None:
    with _broker(tmp_path, backend, policy) as broker:
        _produce(broker.endpoints, 0, COUNT)
        _uploaded(broker)
        deleted = _retention(broker)  # (or the periodic run did, a moment earlier)
        assert deleted["commitLogMinOffset"] > 0 and deleted["heldByTier"] == 0, deleted
        topic = _admin(broker, "GET", f"/v1/topics/{TOPIC}")
        got = _consume(broker.endpoints, "readers", COUNT if policy != "DISABLE" else 1)
        status = _admin(broker, "GET", "/v1/tier")
        cold = status["reads"]["messages"]
        if policy == "DISABLE":
            # Upload only: consumers see what the disk still has, from its oldest.
            first = topic["queueOffsets"][0]["minOffset"]
            assert first > 0 and cold == 0
            rest = _consume(broker.endpoints, "late", COUNT - first)
            assert rest == list(range(first, COUNT))
            return
        assert topic["queueOffsets"][0]["minOffset"] == 0  # the queue starts in the tier
        assert got == list(range(COUNT)), f"{policy}: {len(got)} messages, {got[:5]}..."
        if policy == "FORCE":
            assert cold >= COUNT  # every one of them came from the tier
        else:
            assert cold > 0  # what retention deleted came from the tier
        assert status["reads"]["errors"] == 0 and status["reads"]["fallbacks"] == 0


def test_lookups_by_key_id_and_time_reach_the_tier(
    backend: tuple[str, dict[str, Any], S3Server | None], tmp_path: Path
) -> None:
    with _broker(tmp_path, backend, "NOT_IN_DISK") as broker:
        started = int(time.time() * 1000)
        ids = _produce(broker.endpoints, 0, COUNT)
        _uploaded(broker)
        assert _retention(broker)["commitLogMinOffset"] > 0
        by_key = _admin(broker, "GET", "/v1/messages", topic=TOPIC, key="order-0")
        assert [m["queueOffset"] for m in by_key] == [0]
        by_id = _admin(broker, "GET", f"/v1/messages/{ids[1]}")
        assert [m["queueOffset"] for m in by_id] == [1]
        at = _admin(broker, "GET", f"/v1/topics/{TOPIC}/queues/0/offset", time=started)
        assert at["offset"] == 0 and at["minOffset"] == 0


def test_a_backend_outage_costs_producers_nothing(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    where = {"endpoint": s3_server.endpoint, "bucket": new_bucket(s3_server)}
    quiet_official_client()
    cluster = _cluster(_tiered("s3", where, "NOT_IN_DISK"))
    with local_broker(cluster, tmp_path / "local", OVERRIDES) as broker:
        _produce(broker.endpoints, 0, 50)
        _uploaded(broker)
        s3_server.pause()
        try:
            sent = _produce(broker.endpoints, 50, COUNT - 50)  # raises on any client error
            assert len(sent) == COUNT - 50
            down = wait_for(
                lambda: (s := _admin(broker, "GET", "/v1/tier"))["healthy"] is False and s,
                60,
                0.2,
                "the broker to see the outage",
            )
            assert down["pendingMessages"] > 0 and down["lagBytes"] > 0
            held = _retention(broker)
            assert held["heldByTier"] > 0  # nothing unuploaded is deleted
        finally:
            s3_server.resume()
        _uploaded(broker, timeout=120)  # uploads catch up on their own
        assert _retention(broker)["commitLogMinOffset"] > held["commitLogMinOffset"]
        assert _consume(broker.endpoints, "readers", COUNT) == list(range(COUNT))


def test_a_restart_keeps_the_tier_state(
    backend: tuple[str, dict[str, Any], S3Server | None], tmp_path: Path
) -> None:
    with _broker(tmp_path, backend, "NOT_IN_DISK") as broker:
        _produce(broker.endpoints, 0, COUNT)
        before = _uploaded(broker)
        assert _retention(broker)["commitLogMinOffset"] > 0
        broker.restart()
        wait_for(lambda: _admin(broker, "GET", "/v1/tier")["enabled"], 60, 0.2, "the broker")
        after = _admin(broker, "GET", "/v1/tier")
        assert [(q["topic"], q["startOffset"], q["committedOffset"]) for q in after["queues"]] == [
            (q["topic"], q["startOffset"], q["committedOffset"]) for q in before["queues"]
        ]
        assert _consume(broker.endpoints, "readers", COUNT) == list(range(COUNT))


def test_a_failing_tier_falls_back_to_the_disk(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORCE reads the tier first; with the tier down, what the disk still has is
    served from there (and counted), in order."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    where = {"endpoint": s3_server.endpoint, "bucket": new_bucket(s3_server)}
    quiet_official_client()
    overrides = {**OVERRIDES, "retention_hours": 72.0}  # the disk keeps everything
    cluster = _cluster(_tiered("s3", where, "FORCE"))
    with local_broker(cluster, tmp_path / "local", overrides) as broker:
        _produce(broker.endpoints, 0, 100)
        _uploaded(broker)
        s3_server.pause()
        try:
            assert _consume(broker.endpoints, "readers", 100) == list(range(100))
        finally:
            s3_server.resume()
        reads = _admin(broker, "GET", "/v1/tier")["reads"]
        assert reads["fallbacks"] > 0 and reads["errors"] > 0
