"""Brokers serve from the controllers' catalogue, with the official client, on a
running replicated local cluster and without restarting any broker: a topic put into
the catalogue becomes producible and consumable (and one taken out stops being served,
its messages kept); routes name every group the catalogue names; a write-disabled
group is offered read-only, the producer's sends go to the other group, and consumers
still read what it holds.

The brokers' config files name no other group (``routeGroups: {}``): every group a
route shows beyond a broker's own came from the catalogue, as a group added by a
scale-out would."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, quiet_official_client, wait_for

NAME = "cat"
GROUPS = [f"{NAME}-broker-0", f"{NAME}-broker-1"]
TOPIC = "orders"


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": NAME},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {"groups": 2, "replicas": 2, "flush": "async"},
                "topics": [{"name": TOPIC, "queues": 2}],
                "consumerGroups": [{"name": "billing"}],
            },
        }
    )


@dataclass
class CatalogueCluster:
    runtime: LocalRuntime
    state: dict[str, Any]

    @property
    def endpoints(self) -> str:
        return str(self.state["clientEndpoints"])

    @property
    def group_endpoints(self) -> dict[str, str]:
        return dict(self.state["groupEndpoints"])

    def brokers(self) -> list[dict[str, Any]]:
        return [p for p in self.state["processes"] if p["role"] == "broker"]

    def pids(self) -> dict[str, int]:
        return {p["name"]: p["pid"] for p in self.runtime.running() if p["role"] == "broker"}

    def view(self, proc: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return httpx.get(f"http://{proc['addresses']['admin']}/v1/broker", timeout=2).json()  # type: ignore[no-any-return]
        except (httpx.HTTPError, ValueError):
            return None

    def admin(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """A catalogue write on the (only) controller, which leads."""
        (controller,) = [p for p in self.state["processes"] if p["role"] == "controller"]
        answer = httpx.request(
            method, f"http://{controller['addresses']['admin']}{path}", json=body, timeout=10
        )
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def applied(self, version: int) -> None:
        """Every broker serves catalogue ``version`` (or newer)."""

        def done() -> bool:
            views = [self.view(p) for p in self.brokers()]
            return all(v is not None and v["catalogueVersion"] >= version for v in views)

        wait_for(done, timeout=60, what=f"every broker on catalogue v{version}")

    def raw_send(self, group: str, topic: str) -> spb.SendMessageResponse:
        """One SendMessage straight to ``group``'s endpoint, as a client with stale
        routes would send it."""
        message = pb.Message(
            topic=pb.Resource(name=topic),
            system_properties=pb.SystemProperties(message_id=f"RAW{time.time_ns()}"),
            body=b"raw",
        )
        with grpc.insecure_channel(self.group_endpoints[group]) as channel:
            return MessagingServiceStub(channel).SendMessage(
                spb.SendMessageRequest(messages=[message]),
                metadata=(("x-mq-client-id", "catalogue-test"),),
                timeout=10,
            )

    def route(self, topic: str, endpoint: str | None = None) -> spb.QueryRouteResponse:
        target = endpoint or next(iter(self.group_endpoints.values()))
        with grpc.insecure_channel(target) as channel:
            return MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                metadata=(("x-mq-client-id", "catalogue-test"),),
                timeout=10,
            )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogueCluster]:
    quiet_official_client()
    runtime = LocalRuntime(tmp_path_factory.mktemp("catalogue"))
    state = runtime.up(_manifest(), overrides={**FAST_TUNING, "route_groups": {}})
    try:
        handle = CatalogueCluster(runtime, state)

        def settled() -> bool:
            views = [handle.view(p) for p in handle.brokers()]
            masters = {v["group"] for v in views if v and v["role"] == "master"}
            # every group registered its endpoint, and every broker applied that
            return masters == set(GROUPS) and all(
                v and set(v["catalogue"]["routes"]) == set(GROUPS) for v in views
            )

        wait_for(settled, timeout=120, what="a master per group, routes naming both")
        yield handle
    finally:
        runtime.down()


def _config(endpoints: str) -> ClientConfiguration:
    return ClientConfiguration(endpoints, Credentials(), request_timeout=10)


@contextlib.contextmanager
def _producer(endpoints: str, topic: str) -> Iterator[Producer]:
    producer = Producer(_config(endpoints), (topic,))
    producer.startup()
    try:
        yield producer
    finally:
        producer.shutdown()


def _send(producer: Producer, topic: str, count: int, prefix: str) -> dict[str, str]:
    """Message id -> the broker group that stored it (the client names a queue
    ``<group>.<topic>.<queue id>``)."""
    out = {}
    for i in range(count):
        msg = Message()
        msg.topic = topic
        msg.body = f"{prefix}-{i}".encode()
        receipt = producer.send(msg)
        out[receipt.message_id] = str(receipt.message_queue).split(".")[0]
    return out


def _consume(endpoints: str, group: str, topic: str, want: set[str]) -> set[str]:
    consumer = SimpleConsumer(_config(endpoints), group, {topic: FilterExpression()}, 5)
    consumer.startup()
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while not want <= seen and time.monotonic() < deadline:
            for message in consumer.receive(32, 15) or []:
                seen.add(message.message_id)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return seen


def test_routes_name_every_group_the_catalogue_names(cluster: CatalogueCluster) -> None:
    for group, endpoint in cluster.group_endpoints.items():
        route = cluster.route(TOPIC, endpoint)
        assert route.status.code == pb.Code.OK, route.status
        offered = {
            (q.broker.name, f"{a.host}:{a.port}")
            for q in route.message_queues
            for a in q.broker.endpoints.addresses
        }
        assert offered == set(cluster.group_endpoints.items()), (group, offered)
        assert {q.permission for q in route.message_queues} == {pb.Permission.READ_WRITE}


def test_a_topic_in_the_catalogue_is_served_without_a_restart(cluster: CatalogueCluster) -> None:
    pids = cluster.pids()
    assert cluster.route("fresh").status.code == pb.Code.TOPIC_NOT_FOUND
    cluster.admin("PUT", "/v1/consumer-groups/fresh-readers", {"name": "fresh-readers"})
    answer = cluster.admin("PUT", "/v1/topics/fresh", {"queues": 2})
    cluster.applied(int(answer["version"]))
    with _producer(cluster.endpoints, "fresh") as producer:
        sent = _send(producer, "fresh", 20, "fresh")
        assert set(sent.values()) == set(GROUPS)  # on every group
        received = _consume(cluster.endpoints, "fresh-readers", "fresh", set(sent))
        assert set(sent) <= received
        kept = _send(producer, "fresh", 6, "kept")  # not consumed before the topic goes

    answer = cluster.admin("DELETE", "/v1/topics/fresh")
    cluster.applied(int(answer["version"]))
    assert cluster.route("fresh").status.code == pb.Code.TOPIC_NOT_FOUND
    answer = cluster.admin("PUT", "/v1/topics/fresh", {"queues": 2})
    cluster.applied(int(answer["version"]))
    # served again: what it held is still there, and the group resumes where it was
    assert _consume(cluster.endpoints, "fresh-readers", "fresh", set(kept)) == set(kept)
    assert cluster.pids() == pids  # no broker was restarted


def test_a_write_disabled_group_is_drained_not_written(cluster: CatalogueCluster) -> None:
    drained, other = GROUPS[1], GROUPS[0]
    with _producer(cluster.endpoints, TOPIC) as producer:
        before = _send(producer, TOPIC, 20, "before")  # this producer's routes: both RW
        on_drained = {mid for mid, g in before.items() if g == drained}
        assert on_drained
        answer = cluster.admin("PUT", f"/v1/groups/{drained}/writable", {"writable": False})
        try:
            cluster.applied(int(answer["version"]))
            route = cluster.route(TOPIC)
            permissions = {(q.broker.name, q.permission) for q in route.message_queues}
            assert permissions == {
                (drained, pb.Permission.READ),
                (other, pb.Permission.READ_WRITE),
            }
            refused = cluster.raw_send(drained, TOPIC)
            assert refused.status.code == pb.Code.FORBIDDEN, refused.status
            assert "sending message is forbidden" in refused.status.message
            # the producer still offers the drained group's queues (its routes are 30 s
            # old at most): the refusal makes it retry on the next queue, the other group
            during = _send(producer, TOPIC, 30, "during")
            assert set(during.values()) == {other}
            with _producer(cluster.endpoints, TOPIC) as fresh:  # fresh routes: never chosen
                assert set(_send(fresh, TOPIC, 10, "fresh").values()) == {other}
            views = {v["group"]: v for p in cluster.brokers() if (v := cluster.view(p))}
            assert views[drained]["writable"] is False and views[other]["writable"] is True
            # consumers still read what the drained group holds, and ack it
            assert on_drained <= _consume(cluster.endpoints, "billing", TOPIC, on_drained)
        finally:
            answer = cluster.admin("PUT", f"/v1/groups/{drained}/writable", {"writable": True})
            cluster.applied(int(answer["version"]))
        # writes resume: a producer whose routes postdate the change uses both groups (the
        # one from before may still hold routes fetched during the drain, kept for 30 s)
        with _producer(cluster.endpoints, TOPIC) as fresh:
            after = _send(fresh, TOPIC, 10, "after")
        assert set(after.values()) == set(GROUPS)


def test_brokers_show_who_they_are(cluster: CatalogueCluster) -> None:
    """What the operator reads from /v1/broker: role and broker id, and what the
    catalogue made of the broker."""
    views = [cluster.view(p) for p in cluster.brokers()]
    assert all(v is not None for v in views)
    for v in views:
        assert v is not None
        assert v["role"] in ("master", "slave")
        assert v["brokerId"] == v["replication"]["brokerId"] >= 1
        assert v["writable"] is True and v["catalogueVersion"] >= 1
        assert set(v["catalogue"]["routes"]) == set(GROUPS)
