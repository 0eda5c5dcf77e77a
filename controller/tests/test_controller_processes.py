"""Three real controller processes: leader kill, leader pause, full restart, a long
run that snapshots keep bounded, and the catalogue's admin API and leadership transfer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.api.catalogue import Catalogue
from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import wait_for

pytestmark = pytest.mark.slow

CLUSTER = RocketCluster.model_validate(
    {"metadata": {"name": "ctl"}, "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 0}}}
)


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[LocalRuntime]:
    runtime = LocalRuntime(tmp_path / "c")
    runtime.up(CLUSTER, controller_overrides={"snapshot_every": 50})
    try:
        yield runtime
    finally:
        runtime.down()


def members(runtime: LocalRuntime) -> list[dict[str, Any]]:
    return [p for p in (runtime.state() or {})["processes"] if p["role"] == "controller"]


def cluster_view(proc: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return httpx.get(f"http://{proc['addresses']['admin']}/v1/cluster", timeout=2).json()  # type: ignore[no-any-return]
    except httpx.HTTPError:
        return None


def raft_log(proc: dict[str, Any]) -> list[dict[str, int]]:
    url = f"http://{proc['addresses']['admin']}/v1/raft/log?limit=1000"
    return httpx.get(url, timeout=5).json()  # type: ignore[no-any-return]


def leader(runtime: LocalRuntime, exclude: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    def find() -> dict[str, Any] | None:
        for proc in members(runtime):
            if proc["name"] in exclude:
                continue
            view = cluster_view(proc)
            if view and view["raft"]["state"] == "leader":
                return proc
        return None

    return wait_for(find, timeout=30, what="a controller leader")


def client(runtime: LocalRuntime) -> ControllerClient:
    return ControllerClient([p["addresses"]["raft"] for p in members(runtime)], attempts=40)


async def register(c: ControllerClient, group: str, n: int = 3) -> None:
    for b in range(1, n + 1):
        answer = await c.apply_broker_id("ctl", group, b, f"10.1.0.{b}:10911", f"check-{group}-{b}")
        assert answer.ok, answer


def test_kill_dash_nine_of_the_leader(controllers: LocalRuntime) -> None:
    async def scenario() -> None:
        c = client(controllers)
        try:
            await register(c, "g1")
            old = leader(controllers)
            controllers.kill(old["name"])
            started = time.monotonic()
            await register(c, "g2")  # served by the new leader
            assert time.monotonic() - started < 30
            new = leader(controllers, exclude={old["name"]})
            assert new["name"] != old["name"]
            info = await c.replica_info("g1")
            assert info.ok and sorted(info.data["replicas"]) == ["1", "2", "3"]  # type: ignore[index]
        finally:
            await c.close()

    asyncio.run(scenario())


def test_paused_leader_steps_down_and_never_commits_in_its_old_term(
    controllers: LocalRuntime,
) -> None:
    async def scenario() -> None:
        c = client(controllers)
        try:
            await register(c, "g1")
            old = leader(controllers)
            old_view = cluster_view(old)
            assert old_view is not None
            old_term, old_commit = old_view["raft"]["term"], old_view["raft"]["commit"]
            controllers.pause(old["name"])
            try:
                await register(c, "g2")  # a new leader serves while the old one is frozen
                new = leader(controllers, exclude={old["name"]})
            finally:
                controllers.resume(old["name"])
            # The old leader wakes up believing it leads; a request sent to it at once
            # must not commit in its old term.
            stale = ControllerClient([old["addresses"]["raft"]], attempts=1)
            try:
                with contextlib.suppress(Exception):  # refused or timed out: both fine
                    await stale.apply_broker_id("ctl", "g3", 1, "10.9.9.9:1", "stale")
            finally:
                await stale.close()
            view = wait_for(
                lambda: (v := cluster_view(old)) and v["raft"]["state"] == "follower" and v,
                timeout=30,
                what="the old leader to step down",
            )
            assert view["raft"]["term"] > old_term
            log = raft_log(new)
            committed_old_term = [
                e for e in log if e["term"] == old_term and e["index"] > old_commit
            ]
            assert committed_old_term == [], committed_old_term
        finally:
            await c.close()

    asyncio.run(scenario())


def test_all_members_restarted_keep_the_state(controllers: LocalRuntime) -> None:
    async def fill() -> dict[str, Any]:
        c = client(controllers)
        try:
            await register(c, "g1")
            info = await c.replica_info("g1")
            return info.data or {}
        finally:
            await c.close()

    before = asyncio.run(fill())
    for proc in members(controllers):
        controllers.kill(proc["name"])
    for proc in members(controllers):
        controllers.restart(proc["name"], wait=False)
    controllers.wait_ready()

    async def check() -> None:
        c = client(controllers)
        try:
            info = await c.replica_info("g1")
            assert info.ok and info.data == before
        finally:
            await c.close()

    asyncio.run(check())


def test_a_long_run_keeps_the_log_bounded(controllers: LocalRuntime) -> None:
    async def run() -> None:
        c = client(controllers)
        try:
            for i in range(400):
                answer = await c.put_route(f"topic-{i % 7}", 4 + i % 3)
                assert answer.ok, answer
        finally:
            await c.close()

    asyncio.run(run())
    for proc in members(controllers):

        def snapshotted(proc: dict[str, Any] = proc) -> dict[str, Any] | None:
            view = cluster_view(proc)
            return view if view and view["raft"]["snapshotIndex"] > 0 else None

        view = wait_for(snapshotted, what=f"a snapshot on {proc['name']}")
        raft = view["raft"]
        assert raft["lastIndex"] - raft["firstIndex"] < 200  # compacted (snapshot every 50)
        assert raft["walBytes"] < 64 * 1024
    assert os.path.exists(Path(members(controllers)[0]["configPath"]).parent.parent / "data")


WATCHER = """
import asyncio, sys
from rocketcluster.api.client.controller import ControllerClient

async def main():
    c = ControllerClient([sys.argv[1]])
    async for _ in c.watch_roles(sys.argv[1], "g1", 1):
        print("watching", flush=True)

asyncio.run(main())
"""


def test_a_frozen_brokers_watch_channel_is_closed(controllers: LocalRuntime) -> None:
    """A broker's WatchRoles stream is its liveness: when the broker freezes or is cut
    off, the leader must see the stream close (its own keepalive pings), or the
    frozen master is never replaced (found by the chaos suite)."""

    async def setup() -> None:
        c = client(controllers)
        try:
            await register(c, "g1")
        finally:
            await c.close()

    asyncio.run(setup())
    lead = leader(controllers)

    def channels() -> int:
        view = cluster_view(lead) or {"brokers": []}
        return sum(
            b["channels"] for b in view["brokers"] if (b["group"], b["brokerId"]) == ("g1", 1)
        )

    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER, lead["addresses"]["raft"]], stdout=subprocess.PIPE
    )
    try:
        wait_for(lambda: channels() > 0, timeout=30, what="the watch channel to open")
        os.kill(watcher.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        wait_for(lambda: channels() == 0, timeout=20, what="the frozen watcher's channel to close")
        assert time.monotonic() - frozen < 15
    finally:
        watcher.kill()
        watcher.wait(timeout=10)
        if watcher.stdout is not None:
            watcher.stdout.close()


def admin(proc: dict[str, Any], method: str, path: str, body: Any = None) -> httpx.Response:
    url = f"http://{proc['addresses']['admin']}{path}"
    return httpx.request(method, url, json=body, timeout=15)


def member_id(proc: dict[str, Any]) -> int:
    view = cluster_view(proc)
    assert view is not None, proc["name"]
    return int(view["self"])


def test_the_catalogue_on_real_members(controllers: LocalRuntime) -> None:
    lead = leader(controllers)
    follower = next(p for p in members(controllers) if p["name"] != lead["name"])
    wait_for(lambda: (cluster_view(follower) or {}).get("leader"), what="the follower to know")
    moved = admin(follower, "PUT", "/v1/topics/orders", {"queues": 4})
    assert moved.status_code == 421
    assert moved.json()["detail"]["leaderAdmin"] == lead["addresses"]["admin"]
    put = admin(lead, "PUT", "/v1/topics/orders", {"queues": 4, "messageType": "FIFO"})
    assert put.status_code == 200, put.text
    assert admin(lead, "PUT", "/v1/consumer-groups/billing", {"fifo": True}).status_code == 200
    for proc in members(controllers):  # every member applies it (reads answer anywhere)

        def has_both(proc: dict[str, Any] = proc) -> bool:
            found = Catalogue.model_validate(admin(proc, "GET", "/v1/catalogue").json())
            return found.topic("orders") is not None and found.consumer_group("billing") is not None

        wait_for(has_both, timeout=10, what=f"the catalogue on {proc['name']}")

    async def brokers() -> None:
        c = client(controllers)
        try:
            await register(c, "g1", n=1)
            registered = await c.register_broker("ctl", "g1", 1, "10.1.0.1:10911", "g1.svc:8081")
            assert registered.ok, registered
            found = await c.get_catalogue()
            assert found is not None and found.groups["g1"].endpoint == "g1.svc:8081"
            assert found.topic("orders") is not None
            assert await c.get_catalogue(found.version) is None  # nothing new
            heartbeat = cpb.BrokerHeartbeat(
                group="g1", broker_id=1, address="10.1.0.1:10911", timeout_ms=60_000
            )
            await c.heartbeat_all(heartbeat)
            refused = admin(leader(controllers), "DELETE", "/v1/groups/g1")
            assert refused.status_code == 409 and "1 of group g1 are still alive" in refused.text
            drained = admin(
                leader(controllers), "PUT", "/v1/groups/g1/writable", {"writable": False}
            )
            assert drained.status_code == 200, drained.text
            newer = await c.get_catalogue(found.version)
            assert newer is not None and not newer.groups["g1"].writable
            heartbeat.timeout_ms = 100  # the broker's last word: it is gone 0.1 s later
            await c.heartbeat_all(heartbeat)
            await asyncio.sleep(0.3)
            forgotten = admin(leader(controllers), "DELETE", "/v1/groups/g1")
            assert forgotten.status_code == 200, forgotten.text
            latest = await c.get_catalogue(newer.version)
            assert latest is not None and latest.groups == {}
            info = await c.replica_info("g1")
            assert info.code == "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED"
        finally:
            await c.close()

    asyncio.run(brokers())


def test_transfer_leadership_moves_the_leader(controllers: LocalRuntime) -> None:
    old = leader(controllers)
    target = next(p for p in members(controllers) if p["name"] != old["name"])
    to = member_id(target)
    moved = admin(old, "POST", "/v1/raft/transfer-leadership", {"to": to})
    assert moved.status_code == 200, moved.text
    assert moved.json()["leader"] == to and moved.json()["previous"] == member_id(old)
    assert leader(controllers)["name"] == target["name"]
    again = admin(old, "POST", "/v1/raft/transfer-leadership", {"to": to})
    assert again.status_code == 421
    assert again.json()["detail"]["leaderAdmin"] == target["addresses"]["admin"]
    anyone = admin(target, "POST", "/v1/raft/transfer-leadership", {"to": None})
    assert anyone.status_code == 200, anyone.text
    assert anyone.json()["leader"] != to
    # The new leader takes writes at once.
    assert admin(leader(controllers), "PUT", "/v1/topics/after", {}).status_code == 200


def test_the_catalogue_survives_snapshots_and_a_full_restart(controllers: LocalRuntime) -> None:
    lead = leader(controllers)
    for i in range(60):  # past snapshot_every (50): restored from a snapshot, then the log
        answer = admin(lead, "PUT", f"/v1/topics/t{i}", {"queues": 1 + i % 8})
        assert answer.status_code == 200, answer.text
    before = admin(lead, "GET", "/v1/catalogue").json()
    assert before["version"] == 60
    for proc in members(controllers):
        controllers.kill(proc["name"])
    for proc in members(controllers):
        controllers.restart(proc["name"], wait=False)
    controllers.wait_ready()
    for proc in members(controllers):

        def restored(proc: dict[str, Any] = proc) -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return bool(admin(proc, "GET", "/v1/catalogue").json() == before)
            return False

        wait_for(restored, timeout=30, what=f"the catalogue back on {proc['name']}")
