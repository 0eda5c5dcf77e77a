"""`rocketctl demo standalone`: the product on one machine, with the official client.

Starts examples/standalone.yaml with the local runtime, produces messages with the
official Apache RocketMQ 5 Python client (``rocketmq-python-client``), consumes and
acknowledges them with its SimpleConsumer, shows what the admin API and /metrics
say, and stops the cluster — whatever happens in between.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.client.admin import AdminClient
from rocketcluster.ctl.local.runtime import LocalRuntime

TOPIC = "orders"
GROUP = "billing"


def _produce(endpoints: str, count: int) -> list[str]:
    producer = Producer(ClientConfiguration(endpoints, Credentials()), (TOPIC,))
    producer.startup()
    ids = []
    try:
        for i in range(count):
            msg = Message()
            msg.topic = TOPIC
            msg.body = f"order #{i}: 3 rockets".encode()
            msg.tag = "created" if i % 2 == 0 else "paid"
            msg.keys = f"order-{i}"
            msg.add_property("region", "eu" if i % 3 else "us")
            ids.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()
    return ids


def _consume(endpoints: str, expected: int, timeout: float = 60.0) -> list[str]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials()),
        GROUP,
        {TOPIC: FilterExpression()},
        await_duration=5,
    )
    consumer.startup()
    got: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.receive(32, 30):
                consumer.ack(msg)
                got.append(msg.message_id)
    finally:
        consumer.shutdown()
    return got


def run_standalone_demo(manifest: Path, directory: Path, count: int = 200) -> dict[str, Any]:
    logging.getLogger("rocketmq").setLevel(logging.WARNING)
    runtime = LocalRuntime(directory)
    runtime.down()  # a leftover run of this directory
    state = runtime.up(manifest)
    try:
        endpoints = state["clientEndpoints"]
        started = time.monotonic()
        sent = _produce(endpoints, count)
        produced_s = time.monotonic() - started
        started = time.monotonic()
        received = _consume(endpoints, len(sent))
        consumed_s = time.monotonic() - started
        admin_address = state["processes"][0]["addresses"]["admin"]
        with AdminClient(admin_address) as admin:
            looked_up = admin.message(sent[0])[0]
            offsets = admin.offsets(GROUP)
            metrics = [
                line
                for line in admin.metrics().splitlines()
                if line.startswith(("rocketmq_messages_in_total", "rocketmq_messages_out_total"))
            ]
        missing = sorted(set(sent) - set(received))
        return {
            "cluster": state["name"],
            "clientEndpoints": endpoints,
            "processes": [
                {k: p[k] for k in ("name", "pid", "role", "addresses")} for p in state["processes"]
            ],
            "produced": len(sent),
            "produceSeconds": round(produced_s, 2),
            "consumedAndAcked": len(received),
            "consumeSeconds": round(consumed_s, 2),
            "missing": len(missing),
            "lookupById": {
                "messageId": looked_up["messageId"],
                "body": looked_up["bodyText"],
                "keys": looked_up["keys"],
            },
            "groupOffsets": offsets,
            "metrics": metrics,
            "verdict": "every produced message was consumed" if not missing else "MESSAGES MISSING",
        }
    finally:
        runtime.down()
