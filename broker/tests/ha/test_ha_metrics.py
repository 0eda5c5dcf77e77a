"""Replication and Raft metrics as real processes expose them: one controller and a
group of two replicas (``rocketctl local``), a few messages written, then every
process's /metrics scraped — the HA gauges on master and slave, the controller's Raft
counters, and ``promtool check metrics`` on each exposition."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, wait_for

NAME = "hametrics"
GROUP = f"{NAME}-broker-0"
TOPIC = "orders"
# The one name promtool flags, kept because dashboards and alerts are written against
# it (promtool prefers base units: seconds).
CONTRACTED = {'rocketmq_storage_retention_hours use base unit "seconds" instead of "hours"'}


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": NAME},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {
                    "groups": 1,
                    "replicas": 2,
                    "flush": "sync",
                    "replication": {"inSyncReplicas": 2, "minInSyncReplicas": 2},
                },
                "topics": [{"name": TOPIC, "queues": 2}],
            },
        }
    )


def scrape(proc: dict[str, Any]) -> str:
    return httpx.get(f"http://{proc['addresses']['admin']}/metrics", timeout=10).text


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def value(text: str, name: str) -> float:
    (found,) = samples(text, name)
    return found[1]


@dataclass
class Cluster:
    runtime: LocalRuntime
    state: dict[str, Any]

    def processes(self, role: str) -> list[dict[str, Any]]:
        return [p for p in self.state["processes"] if p["role"] == role]

    def broker_view(self, proc: dict[str, Any]) -> dict[str, Any] | None:
        try:
            answer = httpx.get(f"http://{proc['addresses']['admin']}/v1/broker", timeout=2)
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def by_role(self) -> dict[str, dict[str, Any]]:
        roles = {}
        for proc in self.processes("broker"):
            view = self.broker_view(proc)
            if view is not None:
                roles[view["role"]] = proc
        return roles

    def send(self, count: int) -> None:
        with grpc.insecure_channel(self.state["groupEndpoints"][GROUP]) as channel:
            stub = MessagingServiceStub(channel)
            for i in range(count):
                message = pb.Message(
                    topic=pb.Resource(name=TOPIC),
                    system_properties=pb.SystemProperties(message_id=f"HAM{time.time_ns()}{i}"),
                    body=b"metrics" * 20,
                )
                reply = stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]),
                    metadata=(("x-mq-client-id", "ha-metrics-test"),),
                    timeout=10,
                )
                assert reply.status.code == pb.Code.OK, reply.status


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("ha-metrics"))
    state = runtime.up(_manifest(), overrides=FAST_TUNING)
    try:
        handle = Cluster(runtime, state)

        def settled() -> dict[str, dict[str, Any]] | None:
            roles = handle.by_role()
            if set(roles) != {"master", "slave"}:
                return None
            in_sync = samples(scrape(roles["master"]), "rocketmq_ha_sync_state_set_size")
            return roles if in_sync and in_sync[0][1] == 2 else None

        wait_for(settled, timeout=120, what="a master with its slave in sync")
        handle.send(10)
        yield handle
    finally:
        runtime.down()


def test_every_replica_shows_the_groups_min_in_sync_replicas(cluster: Cluster) -> None:
    roles = cluster.by_role()
    for role in ("master", "slave"):
        assert value(scrape(roles[role]), "rocketmq_ha_min_in_sync_replicas") == 2, role
    master = scrape(roles["master"])
    assert value(master, "rocketmq_ha_sync_state_set_size") == 2
    assert value(master, "rocketmq_ha_role") == 1


def test_slave_ack_lag_names_the_slave(cluster: Cluster) -> None:
    roles = cluster.by_role()
    slave_id = cluster.broker_view(roles["slave"])["brokerId"]  # type: ignore[index]
    lag = samples(scrape(roles["master"]), "rocketmq_ha_slave_ack_lag_bytes")
    assert [labels["slave_id"] for labels, _ in lag] == [str(slave_id)]
    assert samples(scrape(roles["slave"]), "rocketmq_ha_slave_ack_lag_bytes") == []


def test_the_master_counts_flushes_and_storage_state(cluster: Cluster) -> None:
    master = scrape(cluster.by_role()["master"])
    flushes = samples(master, "rocketmq_storage_flush_latency_count")
    assert [labels["flush_type"] for labels, _ in flushes] == ["sync"]
    assert flushes[0][1] >= 1
    assert value(master, "rocketmq_storage_oldest_message_age") >= 0
    assert value(master, "rocketmq_storage_retention_seconds") == 72 * 3600
    assert value(master, "rocketmq_storage_disk_total_bytes") > 0


def test_the_controller_knows_its_leader_and_counts_its_election(cluster: Cluster) -> None:
    (controller,) = cluster.processes("controller")
    text = scrape(controller)
    assert value(text, "rocketmq_controller_has_leader") == 1
    assert value(text, "rocketmq_controller_is_leader") == 1  # the only member leads
    assert value(text, "rocketmq_controller_raft_elections_total") >= 1
    assert value(text, "rocketmq_controller_raft_leader_changes_total") >= 1


def test_promtool_accepts_every_processs_exposition(cluster: Cluster) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `make debs` installs Debian's prometheus package")
    procs = [*cluster.processes("broker"), *cluster.processes("controller")]
    assert len(procs) == 3
    for proc in procs:
        checked = subprocess.run(
            [promtool, "check", "metrics"],
            input=scrape(proc).encode(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        problems = set((checked.stdout + checked.stderr).decode().strip().splitlines())
        allowed = CONTRACTED if proc["role"] == "broker" else set()
        assert problems <= allowed, (proc["name"], problems)
