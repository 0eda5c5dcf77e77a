"""A write-disabled (drained) group, at the protocol: sends are refused with a status
the official clients retry elsewhere, routes offer the group read-only, and
receiving, acking and offsets go on as before. The servicer runs in the test's loop
over a real store; the official client against a real cluster is in e2e/local."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import BrokerGroupEntry, Catalogue
from rocketcluster.broker.messaging.routes import RouteTable
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.messaging.service import MessagingServicer
from rocketcluster.broker.metrics import BrokerMetrics
from rocketcluster.broker.store import MessageStore
from rocketcluster.ctl.testing import small_store_config

ME, OTHER = "c-broker-0", "c-broker-1"


class Context:
    """What the servicer reads from a gRPC call's context."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-mq-client-id", "test-client"),)

    def time_remaining(self) -> float:
        return 5.0


@pytest.fixture
async def servicer(tmp_path: Path) -> AsyncIterator[tuple[MessagingServicer, MessagingRuntime]]:
    cfg = BrokerProcessConfig.model_validate(
        {
            "cluster": "c",
            "group": ME,
            "dataDir": tmp_path,
            "groupEndpoint": "10.0.0.1:8081",
            "topics": [{"name": "orders", "queues": 2}],
            "consumerGroups": [{"name": "readers"}],
        }
    )
    store = await MessageStore.open(small_store_config(tmp_path / "store"))
    rt = MessagingRuntime(cfg, store, BrokerMetrics("c", cfg.node_id))
    try:
        yield MessagingServicer(rt), rt
    finally:
        await rt.stop()
        await store.close()


def _send_request(body: bytes, message_id: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name="orders"),
                system_properties=pb.SystemProperties(message_id=message_id),
                body=body,
            )
        ]
    )


def _drain(rt: MessagingRuntime, writable: bool) -> None:
    catalogue = Catalogue(
        version=7,
        groups={
            ME: BrokerGroupEntry(endpoint="10.0.0.1:8081", writable=writable),
            OTHER: BrokerGroupEntry(endpoint="10.0.0.2:8081"),
        },
    )
    rt.install_routes(RouteTable.from_catalogue(rt.config, catalogue))


async def _receive(servicer: MessagingServicer) -> list[pb.Message]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="readers"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"), id=0),
        batch_size=16,
    )
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromSeconds(2)
    out: list[pb.Message] = []
    async for response in servicer.ReceiveMessage(request, Context()):
        if response.HasField("message"):
            out.append(response.message)
    return out


async def test_sends_are_refused_reads_go_on(
    servicer: tuple[MessagingServicer, MessagingRuntime],
) -> None:
    svc, rt = servicer
    ctx: Any = Context()
    stored = await svc.SendMessage(_send_request(b"before", "ID-BEFORE"), ctx)
    assert stored.status.code == pb.Code.OK

    _drain(rt, writable=False)
    refused = await svc.SendMessage(_send_request(b"during", "ID-DURING"), ctx)
    assert refused.status.code == pb.Code.FORBIDDEN
    assert "sending message is forbidden" in refused.status.message
    assert [e.status.code for e in refused.entries] == [pb.Code.FORBIDDEN]
    assert refused.entries[0].message_id == "ID-DURING"

    route = await svc.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")), ctx)
    assert route.status.code == pb.Code.OK
    permissions = {(q.broker.name, q.permission) for q in route.message_queues}
    assert permissions == {(ME, pb.Permission.READ), (OTHER, pb.Permission.READ_WRITE)}

    messages = await _receive(svc)
    assert [m.system_properties.message_id for m in messages] == ["ID-BEFORE"]
    ack = await svc.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="readers"),
            topic=pb.Resource(name="orders"),
            entries=[
                spb.AckMessageEntry(
                    message_id="ID-BEFORE",
                    receipt_handle=messages[0].system_properties.receipt_handle,
                )
            ],
        ),
        ctx,
    )
    assert ack.status.code == pb.Code.OK
    committed = [s.committed for (g, _, _), s in rt.pop.states().items() if g == "readers"]
    assert sum(committed) == 1  # the offset moved past the acked message

    _drain(rt, writable=True)  # the drain is undone: sends are taken again
    again = await svc.SendMessage(_send_request(b"after", "ID-AFTER"), ctx)
    assert again.status.code == pb.Code.OK
