"""Message traces in a replicated group (one controller, two replicas, sync on both,
``rocketctl local``'s runtime): the master records ``replicated`` with the
SyncStateSet its send waited for, and the slave's store holds the same events by
replication (the master appends them without waiting for it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.model import Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.client.admin import AdminClient, AdminError
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, quiet_official_client, wait_for
from rocketcluster.ctl.workload import Cluster


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "hatrace"},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {
                    "groups": 1,
                    "replicas": 2,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                },
                "topics": [{"name": "orders", "queues": 2, "trace": "all"}],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    quiet_official_client()
    runtime = LocalRuntime(tmp_path_factory.mktemp("trace-ha"))
    state = runtime.up(_manifest(), overrides=FAST_TUNING)
    try:
        handle = Cluster(runtime, state)
        handle.master()
        handle.wait_in_sync(2)
        yield handle
    finally:
        runtime.down()


def _types(proc: dict[str, Any], message_id: str) -> list[dict[str, Any]] | None:
    with AdminClient(str(proc["addresses"]["admin"])) as admin:
        try:
            events: list[dict[str, Any]] = admin.message_trace(message_id)["events"]
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
    return events if [e["type"] for e in events] == ["sent", "stored", "replicated"] else None


def test_replicated_event_and_the_slave_holds_the_events(cluster: Cluster) -> None:
    master = cluster.master()
    (slave,) = [p for p in cluster.brokers() if p["name"] != master["name"]]
    ids = {int(cluster.broker_view(p)["brokerId"]) for p in (master, slave)}  # type: ignore[index]
    config = ClientConfiguration(cluster.endpoints, Credentials(), request_timeout=10)
    producer = Producer(config, ("orders",))
    producer.startup()
    try:
        msg = Message()
        msg.topic, msg.body = "orders", b"replicate me"
        message_id = producer.send(msg).message_id
    finally:
        producer.shutdown()
    on_master = wait_for(lambda: _types(master, message_id), what="the master's events")
    _, stored, replicated = on_master
    assert stored["replication"] == "sync"
    assert sorted(replicated["syncStateSet"]) == sorted(ids)
    assert replicated["time"] >= stored["time"]
    # The master's events reach the slave's store like any record.
    on_slave = wait_for(lambda: _types(slave, message_id), what="the slave's copy")
    assert on_slave == on_master
