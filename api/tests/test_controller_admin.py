"""ControllerAdmin and AsyncControllerAdmin against real controller processes (three
members started by the local runtime): the leader they find is the one the members
agree on, a killed leader is replaced by the next, names that need quoting reach the
controllers intact, and a cluster with security on is reached over https with the
admin token — and refused without it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.client.controller_admin import (
    AsyncControllerAdmin,
    ControllerAdmin,
    ControllerUnavailableError,
)
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.tls import ClientTls
from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState

# A broker group and a topic named as RocketMQ allows, "%41" included: sent
# unquoted, the server would decode it to "A" and answer for another name.
ODD_GROUP = "%RETRY%g%41"
ODD_TOPIC = "%RETRY%orders%41"


def _cluster(name: str, replicas: int, security: bool = False) -> RocketCluster:
    spec: dict[str, object] = {"controller": {"replicas": replicas}, "brokers": {"groups": 0}}
    if security:
        spec["security"] = {
            "tls": {"enabled": True, "secretName": f"{name}-tls"},
            "auth": {"enabled": True},
        }
    return RocketCluster.model_validate({"metadata": {"name": name}, "spec": spec})


@pytest.fixture(scope="module")
def controllers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalRuntime, LocalClusterState]]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("controller-admin"))
    runtime.up(_cluster("ca", 3))
    try:
        state = runtime.cluster_state()
        assert state is not None
        yield runtime, state
    finally:
        runtime.down()


def test_the_leader_found_is_the_one_every_member_names(
    controllers: tuple[LocalRuntime, LocalClusterState],
) -> None:
    _, state = controllers
    with ControllerAdmin(state.controller_admin_addresses()) as admin:
        leader = admin.leader(fresh=True)
        views = admin.views()
    assert all(v.answered for v in views) and len(views) == 3
    leading = [v for v in views if v.state == "leader"]
    assert [v.address for v in leading] == [leader.address]
    assert {v.leader_id for v in views} == {leader.member_id}
    assert leader.term == max(v.term for v in views)
    found = state.listening_at(leader.address)
    assert found is not None and found.role == "controller"
    # Given one follower only, the client follows the leader it names.
    follower = next(v.address for v in views if v.address != leader.address)
    with ControllerAdmin([follower]) as admin:
        assert admin.leader().address == leader.address


def test_names_that_need_quoting_reach_the_controllers_intact(
    controllers: tuple[LocalRuntime, LocalClusterState],
) -> None:
    _, state = controllers

    async def register() -> None:
        client = ControllerClient([p.raft for p in state.controllers()], attempts=40)
        try:
            for b in (1, 2):
                address = f"10.3.0.{b}:1"
                assert (await client.apply_broker_id("ca", ODD_GROUP, b, address, f"k{b}")).ok
                await client.heartbeat_all(
                    cpb.BrokerHeartbeat(
                        group=ODD_GROUP, broker_id=b, address=address, timeout_ms=60_000
                    )
                )
        finally:
            await client.close()

    async def admin_calls() -> None:
        async with AsyncControllerAdmin(state.controller_admin_addresses()) as admin:
            elected = await admin.elect(ODD_GROUP)
            assert elected["group"]["group"] == ODD_GROUP
            assert (await admin.group(ODD_GROUP))["masterId"] in (1, 2)
            assert ODD_GROUP in [g["group"] for g in await admin.groups()]
            events = await admin.events(0, ODD_GROUP, any_member=True)
            assert {e["group"] for e in events} == {ODD_GROUP}

    asyncio.run(register())
    asyncio.run(admin_calls())
    with ControllerAdmin(state.controller_admin_addresses()) as admin:
        put = admin.put("topics", ODD_TOPIC, {"name": ODD_TOPIC, "queues": 2})
        assert put["message"].startswith(f"topic {ODD_TOPIC} created")
        assert ODD_TOPIC in [t["name"] for t in admin.catalogue()["topics"]]
        admin.delete("topics", ODD_TOPIC)
        assert ODD_TOPIC not in [t["name"] for t in admin.catalogue()["topics"]]


def test_a_killed_leader_is_replaced_by_the_next_one(
    controllers: tuple[LocalRuntime, LocalClusterState],
) -> None:
    """The client remembers the leader; once it is killed, the next call finds the
    one the others elect (an election: a second or two, the attempts cover it)."""
    runtime, state = controllers
    with ControllerAdmin(
        state.controller_admin_addresses(), attempts=40, retry_pause=0.25
    ) as admin:
        old = admin.leader()
        killed = state.listening_at(old.address)
        assert killed is not None
        runtime.kill(killed.name)
        try:
            assert isinstance(admin.catalogue()["version"], int)  # through the new leader
            new = admin.leader()
            assert new.address != old.address and new.term > old.term
            down = next(v for v in admin.views() if v.address == old.address)
            assert not down.answered and "no answer" in down.error
        finally:
            runtime.restart(killed.name)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("controller-admin-secure"))
    runtime.up(_cluster("cs", 1, security=True))
    try:
        state = runtime.cluster_state()
        assert state is not None
        yield state
    finally:
        runtime.down()


def test_a_secure_cluster_is_reached_over_https_with_the_token(
    secure: LocalClusterState,
) -> None:
    tls, token = secure.client_tls(), local_admin_token(secure.directory)
    assert tls is not None and token
    addresses = secure.controller_admin_addresses()
    with ControllerAdmin(addresses, tls=tls, token=token) as admin:
        assert admin.leader().member_id == 1
        assert admin.catalogue()["topics"] == []
    # The admin API wants no client certificate: the CA alone is enough.
    with ControllerAdmin(addresses, tls=ClientTls(ca_file=tls.ca_file), token=token) as admin:
        assert admin.groups() == []

    with (
        ControllerAdmin(addresses, tls=tls, attempts=1) as admin,
        pytest.raises(ControllerUnavailableError, match="requires the admin token") as untokened,
    ):
        admin.groups()
    assert untokened.value.status == 401

    with (
        ControllerAdmin(addresses, token=token, attempts=1) as admin,
        pytest.raises(ControllerUnavailableError, match="no answer") as plain,
    ):
        admin.groups()  # http to an https port
    assert plain.value.status == 0 and plain.value.tried


def test_the_state_of_a_real_cluster_reads_typed(
    controllers: tuple[LocalRuntime, LocalClusterState],
) -> None:
    runtime, state = controllers
    assert state.name == "ca" and state.directory == runtime.directory
    assert [p.name for p in state.controllers()] == [f"ca-controller-{i}" for i in range(3)]
    assert state.controller_endpoints == ";".join(p.raft for p in state.controllers())
    assert state.brokers() == [] and state.proxies() == [] and state.tls is None
