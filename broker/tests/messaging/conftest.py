"""A real standalone broker (started by the local runtime) shared by a test module,
and helpers around the official ``rocketmq-python-client``."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client

TOPICS = [
    {"name": "plain", "queues": 4, "messageType": "NORMAL"},
    {"name": "plain-async", "queues": 4, "messageType": "NORMAL"},
    {"name": "simple", "queues": 2, "messageType": "NORMAL"},
    {"name": "push", "queues": 4, "messageType": "NORMAL"},
    {"name": "ordered", "queues": 4, "messageType": "FIFO"},
    {"name": "ordered-retry", "queues": 2, "messageType": "FIFO"},
    {"name": "later", "queues": 2, "messageType": "DELAY"},
    {"name": "txn", "queues": 2, "messageType": "TRANSACTION"},
    {"name": "txn-orphan", "queues": 2, "messageType": "TRANSACTION"},
    {"name": "doomed", "queues": 1, "messageType": "NORMAL"},
    {"name": "filtered", "queues": 2, "messageType": "NORMAL"},
    {"name": "mixed", "queues": 2, "messageType": "MIXED"},
    {"name": "survivor", "queues": 2, "messageType": "NORMAL"},
    {"name": "raw", "queues": 1, "messageType": "NORMAL"},
]
GROUPS = [
    {"name": "g-simple"},
    {"name": "g-push"},
    {"name": "g-fifo", "fifo": True},
    {"name": "g-fifo-retry", "fifo": True, "maxDeliveryAttempts": 6},
    {"name": "g-later"},
    {"name": "g-txn"},
    {"name": "g-dlq", "maxDeliveryAttempts": 2},
    {"name": "g-dlq-reader"},
    {"name": "g-tag"},
    {"name": "g-sql"},
    {"name": "g-survivor"},
    {"name": "g-raw"},
    {"name": "g-plain"},
]


def proto_cluster(name: str = "proto", front_processes: int = 0) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {
                    "groups": 1,
                    "replicas": 1,
                    "flush": "sync",
                    "maxMessageBytes": 65536,
                    "frontProcesses": front_processes,
                },
                "topics": TOPICS,
                "consumerGroups": GROUPS,
            },
        }
    )


# The official flows run against both shapes of a broker: one process serving the
# client port, and a store process behind two front processes (broker/front).
BROKER_SHAPES = {"single-process": 0, "two-fronts": 2}


@pytest.fixture(scope="module", params=list(BROKER_SHAPES.values()), ids=list(BROKER_SHAPES))
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBroker]:
    quiet_official_client()
    directory = tmp_path_factory.mktemp("broker")
    with local_broker(proto_cluster(front_processes=request.param), directory) as handle:
        yield handle


def config(endpoints: str) -> ClientConfiguration:
    return ClientConfiguration(endpoints, Credentials(), request_timeout=10)


def message(topic: str, body: bytes, **kw: object) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    for key, value in kw.items():
        if key == "keys":
            msg.keys = value
        elif key == "properties":
            for k, v in value.items():  # type: ignore[attr-defined]
                msg.add_property(k, v)
        else:
            setattr(msg, key, value)
    return msg


@contextlib.contextmanager
def producer(broker: LocalBroker, *topics: str, checker: object = None) -> Iterator[Producer]:
    p = (
        Producer(config(broker.endpoints), topics, checker)
        if checker
        else Producer(config(broker.endpoints), topics)
    )
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextlib.contextmanager
def simple_consumer(
    broker: LocalBroker,
    group: str,
    topic: str,
    expression: FilterExpression | None = None,
    await_duration: int = 3,
) -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(
        config(broker.endpoints),
        group,
        {topic: expression or FilterExpression()},
        await_duration=await_duration,
    )
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def data_dir(broker: LocalBroker) -> Path:
    return Path(broker.process["configPath"]).parent.parent / "data"
