"""Leader election (operator/leader.py) against the emulator's Lease objects over
real HTTP: one candidate leads, the other waits out the lease duration by its own
clock, a released Lease is taken at once, a paused leader cannot come back, and a
leader that cannot reach the API server steps down before anyone may take over."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp.web
import pytest

from rocketcluster.e2e.kube.emulator import Emulator
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.leader import Decision, LeaderElector, LeaseConfig, LeaseRecord, decide

CONFIG = LeaseConfig(name="op", namespace="default", duration_s=8, renew_deadline_s=6, retry_s=1)


class Clock:
    """A candidate's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def api_url() -> AsyncIterator[str]:
    emulator = Emulator()
    server = aiohttp.web.Server(emulator)
    async with emulator:
        listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        finally:
            listener.close()
            await listener.wait_closed()


def _client(url: str) -> KubeClient:
    return KubeClient(Connection(server=url))


def test_the_rules() -> None:
    lease = LeaseRecord(holder="a", duration_s=8, transitions=0, resource_version="1")
    assert decide(None, 0, "b", CONFIG) is Decision.CREATE
    assert decide(lease, 100, "a", CONFIG) is Decision.RENEW
    assert decide(lease, 7.9, "b", CONFIG) is Decision.WAIT
    assert decide(lease, 8.0, "b", CONFIG) is Decision.TAKE
    released = LeaseRecord(holder="", duration_s=1, transitions=0, resource_version="2")
    assert decide(released, 0, "b", CONFIG) is Decision.TAKE
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(duration_s=5, renew_deadline_s=10)


async def test_one_leads_the_other_waits_then_takes_over(api_url: str) -> None:
    clock_a, clock_b = Clock(), Clock()
    async with _client(api_url) as ca, _client(api_url) as cb:
        a = LeaderElector(ca, CONFIG, "a", clock_a)
        b = LeaderElector(cb, CONFIG, "b", clock_b)
        assert await a.try_once() and a.leading()
        assert not await b.try_once() and not b.leading()
        # a renews; b's clock says the record keeps changing, so it keeps waiting
        clock_a.now += 5
        clock_b.now += 5
        assert await a.try_once()
        clock_b.now += 7
        assert not await b.try_once()
        # a stops renewing (paused, killed): b waits a whole duration from the last change
        clock_b.now += 8
        assert await b.try_once() and b.leading()
        # a comes back: its renew is refused (b holds it), and a no longer leads
        clock_a.now += 20
        assert not a.leading()
        assert not await a.try_once()
        lease = await ca.request("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/op")
        assert lease["spec"]["holderIdentity"] == "b"
        assert lease["spec"]["leaseTransitions"] == 1


async def test_a_released_lease_is_taken_at_once(api_url: str) -> None:
    async with _client(api_url) as ca, _client(api_url) as cb:
        a = LeaderElector(ca, CONFIG, "a", Clock())
        b = LeaderElector(cb, CONFIG, "b", Clock())
        assert await a.try_once()
        assert not await b.try_once()
        await a.release()
        assert not a.leading()
        assert await b.try_once()  # no lease duration to wait out


async def test_two_candidates_racing_for_a_new_lease_elect_one(api_url: str) -> None:
    clients = [_client(api_url) for _ in range(4)]
    try:
        electors = [LeaderElector(c, CONFIG, f"c{i}", Clock()) for i, c in enumerate(clients)]
        won = await asyncio.gather(*(e.try_once() for e in electors))
        assert sum(won) == 1, won
    finally:
        for c in clients:
            await c.close()


async def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires(
    api_url: str,
) -> None:
    """The API server unreachable: keep() returns (the process then exits) once the
    renew deadline has passed, which is before any other candidate may take over."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{hole.getsockname()[1]}"  # bound, never listening
        async with _client(api_url) as good, _client(dead) as bad:
            fast = LeaseConfig(
                name="op", namespace="default", duration_s=3, renew_deadline_s=2, retry_s=0.5
            )
            leader = LeaderElector(good, fast, "a")
            assert await leader.try_once()
            leader._client = bad  # the network between it and the API server goes
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(leader.keep(), timeout=30)
            took = asyncio.get_running_loop().time() - started
            assert not leader.leading()
            assert took < fast.duration_s + fast.retry_s, took
