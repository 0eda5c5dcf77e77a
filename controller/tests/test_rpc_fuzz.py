"""Fuzzing the controller's gRPC handlers on a live controller process: random field
values in every broker-facing request, and Raft batches a member would never send
(a stranger's batch once made this member follow a leader that is no member, and
every request then failed with KeyError).
A fixed number of derandomized examples (bounded, reproducible). Every request gets
a reply with one of the controller's result codes (Raft: an ack or INVALID_ARGUMENT)
— never an exception escaping a handler — and the controller keeps working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.generated.controller_pb2_grpc import ControllerServiceStub
from rocketcluster.controller.state import ControllerCode
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import wait_for

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CODES = {c.value for c in ControllerCode}
CLUSTER = RocketCluster.model_validate(
    {"metadata": {"name": "cfz"}, "spec": {"controller": {"replicas": 1}, "brokers": {"groups": 0}}}
)
TEXT = st.one_of(
    st.text(max_size=30), st.sampled_from(["", "cfz", "cfz-broker-0", "..", "a/b", "x\x00y"])
)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U64 = st.integers(0, (1 << 64) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
SMALL = st.integers(-3, 5)


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerServiceStub]:
    runtime = LocalRuntime(Path(tmp_path_factory.mktemp("cfz")))
    state = runtime.up(CLUSTER)
    [member] = [p for p in state["processes"] if p["role"] == "controller"]
    channel = grpc.insecure_channel(member["addresses"]["raft"])
    try:
        stub = ControllerServiceStub(channel)  # type: ignore[no-untyped-call]
        wait_for(lambda: leads(stub), what="the controller to lead")
        yield stub
    finally:
        channel.close()
        runtime.down()


def leads(stub: ControllerServiceStub) -> bool:
    reply = stub.GetCatalogue(cpb.GetCatalogueRequest(), timeout=10)
    return bool(reply.code == ControllerCode.SUCCESS)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "ApplyBrokerId",
                "RegisterBroker",
                "Heartbeat",
                "AlterSyncStateSet",
                "ElectMaster",
                "GetReplicaInfo",
                "PutRoute",
                "GetCatalogue",
            ]
        )
    )
    group, broker_id = draw(TEXT), draw(st.one_of(SMALL, I64))
    if kind == "ApplyBrokerId":
        return kind, cpb.ApplyBrokerIdRequest(
            cluster=draw(TEXT), group=group, broker_id=broker_id, address=draw(TEXT),
            check_code=draw(TEXT),
        )  # fmt: skip
    if kind == "RegisterBroker":
        return kind, cpb.RegisterBrokerRequest(
            cluster=draw(TEXT), group=group, broker_id=broker_id, address=draw(TEXT),
            client_endpoint=draw(TEXT),
        )  # fmt: skip
    if kind == "Heartbeat":
        return kind, cpb.BrokerHeartbeat(
            cluster=draw(TEXT), group=group, broker_id=broker_id, address=draw(TEXT),
            epoch=draw(st.one_of(SMALL, I64)), max_offset=draw(I64),
            confirm_offset=draw(I64), election_priority=draw(I32),
            timeout_ms=draw(st.one_of(st.integers(-5, 100_000), I64)),
            seen_master_epoch=draw(st.one_of(SMALL, I64)),
        )  # fmt: skip
    if kind == "AlterSyncStateSet":
        return kind, cpb.AlterSyncStateSetRequest(
            group=group, master_id=broker_id, master_epoch=draw(st.one_of(SMALL, I64)),
            sync_state_set_epoch=draw(st.one_of(SMALL, I64)),
            sync_state_set=draw(st.lists(st.one_of(SMALL, I64), max_size=4)),
        )  # fmt: skip
    if kind == "ElectMaster":
        return kind, cpb.ElectMasterRequest(
            group=group, broker_id=broker_id, designated=draw(st.booleans()), reason=draw(TEXT)
        )
    if kind == "GetReplicaInfo":
        return kind, cpb.GetReplicaInfoRequest(group=group)
    if kind == "PutRoute":
        return kind, cpb.RouteRequest(
            topic=draw(TEXT), queues=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
            message_type=draw(st.one_of(TEXT, st.sampled_from(["NORMAL", "FIFO"]))),
            groups=draw(st.lists(TEXT, max_size=3)), delete=draw(st.booleans()),
        )  # fmt: skip
    return kind, cpb.GetCatalogueRequest(known_version=draw(U64))


@FUZZ
@given(case=requests())
def test_random_requests_get_a_result_code(
    controller: ControllerServiceStub, case: tuple[str, Any]
) -> None:
    kind, request = case
    reply = getattr(controller, kind)(request, timeout=20)
    assert reply.code in CODES, (kind, reply, request)
    if reply.code != ControllerCode.SUCCESS:
        assert reply.message, (kind, reply)


@st.composite
def raft_batches(draw: st.DrawFn) -> cpb.RaftBatch:
    messages = []
    for _ in range(draw(st.integers(1, 3))):
        message = cpb.RaftMessage(
            type=draw(st.one_of(st.integers(0, 20), st.integers(0, (1 << 32) - 1))),
            to=draw(st.one_of(st.integers(0, 3), U64)),
            term=draw(st.one_of(st.integers(0, 2), U64)),
            log_term=draw(st.one_of(st.integers(0, 2), U64)),
            index=draw(st.one_of(st.integers(0, 5), U64)),
            commit=draw(st.one_of(st.integers(0, 5), U64)),
            entries=[
                cpb.Entry(term=draw(U64), index=draw(U64), data=draw(st.binary(max_size=20)))
                for _ in range(draw(st.integers(0, 2)))
            ],
            reject=draw(st.booleans()),
            reject_hint=draw(U64),
            has_snapshot=draw(st.booleans()),
        )
        setattr(message, "from", draw(st.one_of(st.integers(0, 3), U64)))
        messages.append(message)
    return cpb.RaftBatch(messages=messages)


@settings(FUZZ, max_examples=100)
@given(batch=raft_batches())
def test_raft_batches_from_strangers_are_acked_or_refused(
    controller: ControllerServiceStub, batch: cpb.RaftBatch
) -> None:
    try:
        controller.Raft(batch, timeout=20)
    except grpc.RpcError as exc:
        assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, exc
        assert exc.details()


def test_the_controller_works_after_the_fuzz(controller: ControllerServiceStub) -> None:
    wait_for(lambda: leads(controller), what="the controller to lead again")
    reply = controller.PutRoute(
        cpb.RouteRequest(topic="after-fuzz", queues=2, message_type="NORMAL"), timeout=20
    )
    assert reply.code == ControllerCode.SUCCESS, reply
