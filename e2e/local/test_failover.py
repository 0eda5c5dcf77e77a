"""Replicated broker groups under failure, with the official client producing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.ctl.lean_workload import LeanWorkload
from rocketcluster.ctl.testing import wait_for

from .conftest import Cluster, Workload, audit, ha_cluster, running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("ha"), ha_cluster()) as handle:
        yield handle


@pytest.fixture
def cluster(shared: Cluster) -> Cluster:
    """One cluster for the module (its start is most of a test's cost), mended after
    each test: what a test killed or paused runs again and all three replicas are in
    sync before the next one starts. Each test reads only what it wrote itself (its
    own acknowledged ids, its own log lines)."""
    shared.heal()
    return shared


def _assert_nothing_lost_or_doubled(cluster: Cluster, workload: Workload, note: str = "") -> None:
    """Every acknowledged message is delivered, and none at two different offsets."""
    assert len(workload.acked) > 100
    seen = audit(cluster.endpoints, "audit", set(workload.acked))
    lost = set(workload.acked) - set(seen)
    assert not lost, f"{len(lost)} acknowledged messages lost {note}"
    twice = {mid: places for mid, places in seen.items() if len(places) > 1}
    assert not twice, f"delivered at two different offsets: {list(twice.items())[:3]}"


def test_master_kills_lose_nothing_acknowledged(cluster: Cluster) -> None:
    workload = Workload(cluster.endpoints)
    workload.start()
    recoveries = []
    try:
        for _ in range(2):
            time.sleep(2)
            victim = cluster.master()
            killed_at = time.time()
            cluster.runtime.kill(victim["name"])
            new = cluster.master(exclude={victim["name"]})
            assert new["name"] != victim["name"]
            time.sleep(3)
            recoveries.append(workload.recovery_after(killed_at))
            cluster.runtime.restart(victim["name"])  # it comes back as a slave
            cluster.wait_in_sync(3)
    finally:
        workload.stop()
    _assert_nothing_lost_or_doubled(cluster, workload)
    assert all(r < 30 for r in recoveries), recoveries


def test_switchovers_under_load_lose_nothing_acknowledged(cluster: Cluster) -> None:
    """An admin's switchover (``rocketctl elect --broker-id``) under continuous produce
    succeeds at the first request: the master pauses its appends until the designated
    slave holds its whole log (phase 0), is deposed, and the slave is elected. A
    client connected straight to the old master sees a pause, not an error: its
    requests wait at the write gate and are then forwarded to the new master."""
    workload = Workload(cluster.endpoints)
    heavy = LeanWorkload(cluster.endpoints.split(";")[0], inflight=4)  # the slaves lag
    workload.start()
    heavy.start()
    outcomes: list[str] = []
    directs: list[LeanWorkload] = []
    try:
        for _ in range(3):
            time.sleep(1)
            view = cluster.wait_in_sync(3)
            order = sorted(int(b) for b in view["replicas"])
            target = order[(order.index(view["masterId"]) + 1) % len(order)]
            direct = LeanWorkload(
                cluster.process_of(view["masterId"], view)["addresses"]["client"],
                inflight=1,
                attempts=1,  # every failed request counts
            )
            directs.append(direct)
            direct.start()
            time.sleep(0.5)
            status, answer = cluster.switchover(target)
            outcomes.append(json.dumps(answer))
            time.sleep(0.5)
            direct.stop()
            assert status == 200, outcomes
            after = answer["group"]
            assert after["masterId"] == target
            assert after["masterEpoch"] == view["masterEpoch"] + 2  # deposed, then elected
            assert cluster.master()["name"] == cluster.process_of(target, after)["name"]
            assert not direct.errors, direct.errors  # held at the gate, then forwarded
            assert direct.acked
    finally:
        heavy.stop()
        workload.stop()
    assert len(heavy.acked) > 1000
    for lean in (heavy, *directs):
        workload.acked.update(lean.acked)
    _assert_nothing_lost_or_doubled(cluster, workload, f"switchovers: {outcomes}")


def test_a_slave_that_cannot_catch_up_is_refused_without_deposing_the_master(
    cluster: Cluster,
) -> None:
    """Phase 0 fails (the designated slave is paused with SIGSTOP while writes go on):
    the switchover is refused with the numbers, and nothing changes — same master,
    same master epoch; the writes were never paused for it."""
    workload = Workload(cluster.endpoints)
    workload.start(producers=1)
    try:
        time.sleep(1)
        view = cluster.wait_in_sync(3)
        target = next(b for b in view["syncStateSet"] if b != view["masterId"])
        paused = cluster.process_of(target, view)
        cluster.runtime.pause(paused["name"])
        try:
            time.sleep(0.5)  # writes it will not have
            status, answer = cluster.switchover(target)
        finally:
            cluster.runtime.resume(paused["name"])
        assert status == 409, answer
        message = answer["detail"]["message"]
        assert f"switchover to broker {target} refused: broker {target} is" in message, message
        assert "behind after" in message and "stays master" in message, message
        after = cluster.group_view()
        assert after is not None
        assert (after["masterId"], after["masterEpoch"]) == (view["masterId"], view["masterEpoch"])
        time.sleep(1)
    finally:
        workload.stop()
    _assert_nothing_lost_or_doubled(cluster, workload)


def test_unreplicated_tail_is_never_delivered_and_the_old_master_rejoins(cluster: Cluster) -> None:
    import asyncio

    from rocketcluster.api.client.lean import LeanClient, OutgoingMessage

    from .conftest import TOPIC

    before = Workload(cluster.endpoints)  # shared history first: epoch 1 has data
    before.start(producers=1)
    time.sleep(2)
    before.stop()
    old = cluster.master()
    log_start = Path(old["logPath"]).stat().st_size  # what earlier tests made it write
    slaves = [b for b in cluster.brokers() if b["name"] != old["name"]]
    for s in slaves:  # the slaves die; they stay in the set for max_time_not_catchup
        cluster.runtime.kill(s["name"])
    try:

        async def orphan_write() -> list[str]:
            async with LeanClient(old["addresses"]["client"], timeout=5) as client:
                entries = await client.send(
                    TOPIC,
                    [
                        OutgoingMessage(b"never replicated", message_id=f"ORPHAN{i}")
                        for i in range(3)
                    ],
                )
                return [e.status.message for e in entries]

        answers = asyncio.run(orphan_write())
        assert all("replication" in a for a in answers), answers  # not acknowledged
        cluster.runtime.kill(old["name"])
    finally:
        for s in slaves:
            cluster.runtime.restart(s["name"], wait=False)
    new = cluster.master(exclude={old["name"]})
    workload = Workload(cluster.endpoints)
    workload.start(producers=1)
    time.sleep(2)
    workload.stop()
    cluster.runtime.restart(old["name"])
    view = cluster.wait_in_sync(3)
    assert view["masterId"] is not None
    with Path(old["logPath"]).open(errors="replace") as log_file:
        log_file.seek(log_start)
        assert "diverged from the master" in log_file.read()
    acked = set(workload.acked) | set(before.acked)
    seen = audit(cluster.endpoints, "billing", acked)
    assert not any(mid.startswith("ORPHAN") for mid in seen)
    assert acked <= set(seen)
    assert new["name"] != old["name"]


def test_a_slave_down_for_long_catches_up_and_rejoins(cluster: Cluster) -> None:
    master = cluster.master()
    slave = next(b for b in cluster.brokers() if b["name"] != master["name"])
    cluster.runtime.kill(slave["name"])
    cluster.wait_in_sync(2)  # shrunk after haMaxTimeSlaveNotCatchup
    workload = Workload(cluster.endpoints)
    workload.start(producers=1)
    time.sleep(4)
    workload.stop()
    cluster.runtime.restart(slave["name"])
    cluster.wait_in_sync(3)
    master_view = cluster.broker_view(master)
    slave_view = wait_for(
        lambda: (
            (v := cluster.broker_view(slave))
            and master_view
            and v["commitLog"]["maxOffset"] >= master_view["commitLog"]["maxOffset"]
            and v
        ),
        what="the slave to catch up",
    )
    assert slave_view["role"] == "slave"


def test_brokers_serve_without_controllers(cluster: Cluster) -> None:
    for controller in cluster.controllers():
        cluster.runtime.kill(controller["name"])
    _writes_are_served(cluster)


def test_two_of_three_down_the_survivor_serves(cluster: Cluster) -> None:
    master = cluster.master()
    for slave in [b for b in cluster.brokers() if b["name"] != master["name"]]:
        cluster.runtime.kill(slave["name"])
    cluster.wait_in_sync(1)
    _writes_are_served(cluster)


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election(tmp_path: Path, unclean: bool) -> None:
    with running(tmp_path / "u", ha_cluster(unclean=unclean)) as cluster:
        master = cluster.master()
        slaves = [b for b in cluster.brokers() if b["name"] != master["name"]]
        outsider, other = slaves
        cluster.runtime.pause(outsider["name"])
        cluster.wait_in_sync(2)  # the paused one left the set
        cluster.runtime.kill(other["name"])
        cluster.runtime.kill(master["name"])
        cluster.runtime.resume(outsider["name"])
        if not unclean:
            time.sleep(5)
            view = cluster.group_view()
            assert view is not None and view["masterId"] is None
        else:
            cluster.master(exclude={master["name"], other["name"]})
            events = wait_for(
                lambda: [
                    e
                    for e in _events(cluster)
                    if e["command"] == "ElectMaster" and "unclean" in e["reason"]
                ],
                what="an unclean election in the history",
            )
            assert events[-1]["detail"].get("unclean") is True


def _events(cluster: Cluster) -> list[dict[str, Any]]:
    import httpx

    for proc in cluster.controllers():
        try:
            return httpx.get(f"http://{proc['addresses']['admin']}/v1/events", timeout=2).json()  # type: ignore[no-any-return]
        except httpx.HTTPError:
            continue
    return []


def _writes_are_served(cluster: Cluster) -> None:
    """A short official-client workload: acknowledged, and all of it readable."""
    workload = Workload(cluster.endpoints)
    workload.start(producers=1)
    time.sleep(3)
    workload.stop()
    assert len(workload.acked) > 10
    seen = audit(cluster.endpoints, "billing", set(workload.acked), timeout=60)
    assert set(workload.acked) <= set(seen)
