"""Browsing a queue whose head only the tier still holds: pages by offset cross from
the tier to the local store without a gap, a time span and a body download reach
into the tier (a real broker, the posix backend, local retention run by hand)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.model import Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import local_broker, quiet_official_client, wait_for

pytestmark = pytest.mark.slow

TOPIC = "history"
COUNT = 400
BODY = 600  # bytes: COUNT messages fill four 64 KiB commit-log segments
OVERRIDES: dict[str, Any] = {
    "segment_size": 64 << 10,
    "max_message_bytes": 8 << 10,
    "retention_hours": 0.0001,
}


def _cluster(tier_dir: Path) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "console-tier"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "sync"},
                "topics": [{"name": TOPIC, "queues": 1}],
                "tieredStorage": {
                    "enabled": True,
                    "backend": "posix",
                    "posix": {"path": str(tier_dir)},
                    "readPolicy": "NOT_IN_DISK",
                    "uploadBatchBytes": 8192,
                    "uploadIntervalSeconds": 0.2,
                },
            },
        }
    )


def _body(i: int) -> bytes:
    return f"{i:08d}:".encode().ljust(BODY, b".")


def test_browsing_crosses_from_the_tier_to_the_disk(tmp_path: Path) -> None:
    quiet_official_client()
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    with local_broker(_cluster(tier_dir), tmp_path / "local", OVERRIDES) as broker:
        started = int(time.time() * 1000)
        producer = Producer(
            ClientConfiguration(broker.endpoints, Credentials(), request_timeout=10), (TOPIC,)
        )
        producer.startup()
        try:
            for i in range(COUNT):
                msg = Message()
                msg.topic, msg.body = TOPIC, _body(i)
                producer.send(msg)
        finally:
            producer.shutdown()
        with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=30) as http:
            wait_for(
                lambda: (s := http.get("/v1/tier").json())["pendingMessages"] == 0 and s["healthy"],
                60,
                0.2,
                "every message in the tier",
            )
            time.sleep(0.5)  # older than retentionHours by their last write
            retention = http.post("/v1/store/retention").json()
            assert retention["commitLogMinOffset"] > 0, retention
            before = http.get("/v1/tier").json()["reads"]["messages"]

            bodies: list[bytes] = []
            offset = 0
            while True:
                page = http.get(
                    f"/v1/topics/{TOPIC}/queues/0/messages", params={"from": offset, "limit": 100}
                ).json()
                assert page["minOffset"] == 0 and page["maxOffset"] == COUNT
                if not page["messages"]:
                    break
                assert [m["queueOffset"] for m in page["messages"]] == list(
                    range(offset, page["nextOffset"])
                )
                bodies += [m["bodyText"].encode() for m in page["messages"]]
                offset = page["nextOffset"]
            assert bodies == [_body(i) for i in range(COUNT)]
            assert http.get("/v1/tier").json()["reads"]["messages"] > before  # some were cold

            span = http.get(
                f"/v1/topics/{TOPIC}/messages",
                params={"start": started, "end": int(time.time() * 1000), "limit": 5},
            ).json()
            assert [m["queueOffset"] for m in span["messages"]] == [0, 1, 2, 3, 4]
            assert span["truncated"] is True
            body = http.get(f"/v1/topics/{TOPIC}/queues/0/messages/0/body")
            assert body.status_code == 200 and body.content == _body(0)
