"""The official clients' route refresh against a broker with the default client
limits: every 30 s an official client queries the route of every topic it has used,
all at once on the one connection its sends use (rocketmq-clients' Python
ClientRouteManager). gRPC's C client opens those streams without waiting for the
server's stream limit, the server refuses the excess with RST_STREAM REFUSED_STREAM,
and the official client, built with gRPC retries off, sees UNAVAILABLE — for the
route refresh and for a send caught in it. Issue #27's scale bench met it with 1,000
topics; the default per-connection stream limit was 256."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator

import pytest
from grpc import aio
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker

TOPICS = 50
BURST = 1000  # the topics one official client has sent to
ROUNDS = 3
# The official Python client's channel (rocketmq.v5.client.connection.rpc_channel).
OFFICIAL_OPTIONS = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]
CLIENT = (("x-mq-client-id", "route-burst"),)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "burst"},
            "spec": {
                "controller": {"replicas": 0},
                "topics": [{"name": f"topic-{i}", "queues": 8} for i in range(TOPICS)],
            },
        }
    )
    with local_broker(cluster, tmp_path_factory.mktemp("burst")) as handle:
        yield handle


def _route(i: int, host: str, port: int) -> spb.QueryRouteRequest:
    request = spb.QueryRouteRequest(topic=pb.Resource(name=f"topic-{i % TOPICS}"))
    address = request.endpoints.addresses.add()
    address.host, address.port = host, port
    return request


def test_a_burst_of_route_queries_on_one_connection_is_answered_whole(
    broker: LocalBroker,
) -> None:
    host, _, port = broker.endpoints.partition(":")

    async def bursts() -> list[collections.Counter[str]]:
        async with aio.insecure_channel(broker.endpoints, OFFICIAL_OPTIONS) as channel:
            stub = MessagingServiceStub(channel)
            first = await stub.QueryRoute(_route(0, host, int(port)), metadata=CLIENT, timeout=30)
            assert first.status.code == pb.Code.OK  # connected: the server's SETTINGS known
            outcomes = []
            for _ in range(ROUNDS):
                calls = [
                    stub.QueryRoute(_route(i, host, int(port)), metadata=CLIENT, timeout=60)
                    for i in range(BURST)
                ]
                answers = await asyncio.gather(*calls, return_exceptions=True)
                outcomes.append(
                    collections.Counter(
                        pb.Code.Name(a.status.code)
                        if isinstance(a, spb.QueryRouteResponse)
                        else f"{a.code().name}: {a.details()}"
                        if isinstance(a, aio.AioRpcError)
                        else repr(a)
                        for a in answers
                    )
                )
            return outcomes

    for n, outcome in enumerate(asyncio.run(bursts())):
        assert outcome == {"OK": BURST}, f"burst {n}: {dict(outcome)}"
