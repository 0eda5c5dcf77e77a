"""Stats snapshots in a replicated group (one controller, two replicas, ``rocketctl
local``'s runtime): only the master publishes, the slave holds the same snapshots by
replication, and after the master is killed the new master goes on appending to the
same topic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rocketcluster.api.client.admin import AdminClient, StoredSnapshot
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, wait_for
from rocketcluster.ctl.workload import Cluster

NAME = "hastats"


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": NAME},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {
                    "groups": 1,
                    "replicas": 2,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                },
                "topics": [{"name": "orders", "queues": 2}],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("stats-ha"))
    state = runtime.up(_manifest(), overrides={**FAST_TUNING, "stats_interval_seconds": 0.5})
    try:
        handle = Cluster(runtime, state)
        handle.master()
        handle.wait_in_sync(2)
        yield handle
    finally:
        runtime.down()


def _snapshots(proc: dict[str, Any]) -> list[StoredSnapshot]:
    with AdminClient(str(proc["addresses"]["admin"])) as admin:
        return list(admin.iter_stats_snapshots(0, page_size=200))


def _at_least(proc: dict[str, Any], count: int) -> Callable[[], list[StoredSnapshot] | None]:
    def probe() -> list[StoredSnapshot] | None:
        found = _snapshots(proc)
        return found if len(found) >= count else None

    return probe


def _broker_id(cluster: Cluster, proc: dict[str, Any]) -> int:
    view = cluster.broker_view(proc)
    assert view is not None
    return int(view["brokerId"])


def test_only_the_master_publishes_and_its_successor_continues(cluster: Cluster) -> None:
    master = cluster.master()
    (slave,) = [p for p in cluster.brokers() if p["name"] != master["name"]]
    master_id, slave_id = _broker_id(cluster, master), _broker_id(cluster, slave)

    published = wait_for(_at_least(master, 3), timeout=60, what="three snapshots")
    assert {s.snapshot.broker_id for s in published} == {master_id}
    assert [s.offset for s in published] == list(range(len(published)))

    # The slave reads the same snapshots from its replicated copy, and adds none.
    replicated = wait_for(
        _at_least(slave, len(published)), timeout=60, what="the snapshots on the slave"
    )
    assert {s.snapshot.broker_id for s in replicated} == {master_id}
    assert [s.snapshot.time for s in replicated[: len(published)]] == [
        s.snapshot.time for s in published
    ]

    cluster.runtime.kill(master["name"])
    promoted = cluster.master(exclude={master["name"]})
    assert promoted["name"] == slave["name"]

    def continued() -> list[StoredSnapshot] | None:
        found = _snapshots(promoted)
        return found if any(s.snapshot.broker_id == slave_id for s in found) else None

    after = wait_for(continued, timeout=90, what="a snapshot from the new master")
    assert [s.offset for s in after] == list(range(len(after)))  # one topic, no gap
    ids = [s.snapshot.broker_id for s in after]
    first_new = ids.index(slave_id)
    assert set(ids[:first_new]) == {master_id} and set(ids[first_new:]) == {slave_id}
    assert first_new >= len(published)
