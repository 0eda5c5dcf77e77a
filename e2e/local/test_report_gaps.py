"""A broker and the controller stop answering in the middle of a report run: their
partitions are retried, then the run finishes without them and the report says which
partitions are missing, instead of failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, wait_for
from rocketcluster.jobs.failpoints import FAILPOINT_ENV

pytestmark = pytest.mark.slow


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "gaps"},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {"groups": 2, "replicas": 1, "statsIntervalSeconds": 1.0},
                "topics": [{"name": "orders", "queues": 2}],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalRuntime, LocalClusterState]]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("gaps") / "cluster")
    runtime.up(_manifest(), overrides={"segment_size": 16 << 20, **DISK_GUARDS_OFF})
    try:
        state = runtime.cluster_state()
        assert state is not None
        for broker in state.brokers():  # a few snapshots in every group's stats topic

            def published(admin: str = broker.admin) -> bool:
                page = httpx.get(f"http://{admin}/v1/stats/snapshots", params={"limit": 1})
                return page.status_code == 200 and int(page.json()["maxOffset"]) >= 3

            wait_for(published, timeout=60, what=f"stats snapshots on {broker.name}")
        yield runtime, state
    finally:
        runtime.down()


def _announced(gate: Path, prefix: str, timeout: float = 120.0) -> list[str]:
    """The readers of ``prefix`` (``table_group``) waiting at the gate, once one is."""

    def found() -> list[str] | None:
        names = sorted(p.name for p in gate.glob(f"reading-{prefix}*"))
        return names or None

    return wait_for(found, timeout=timeout, what=f"a reader announcing {prefix}")


def test_a_broker_and_the_controller_lost_mid_run_are_reported_missing(
    cluster: tuple[LocalRuntime, LocalClusterState], tmp_path: Path
) -> None:
    runtime, state = cluster
    lost_group = state.groups()[1]
    kept_group = state.groups()[0]
    victim = state.brokers(lost_group)[0]
    controller = state.controllers()[0]
    gate = tmp_path / "gate"
    gate.mkdir()
    for table in ("queue_stats", "events"):
        (gate / f"hold-{table}").touch()
    out = tmp_path / "reports"
    command = [sys.executable, "-m", "rocketcluster.jobs.run", "--json", "--cluster", "gaps"]
    command += ["--controller", f"http://{controller.admin}", "--out", str(out)]
    command += ["--history-hours", "1"]
    env = {**os.environ, FAILPOINT_ENV: str(gate)}
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Every group's first stats partition is about to be read: one broker dies.
        _announced(gate, f"queue_stats_{lost_group}")
        runtime.kill(victim.name)
        (gate / "hold-queue_stats").unlink()
        # The stats are read; the controllers' history is next: the controller dies.
        _announced(gate, "events")
        runtime.kill(controller.name)
        (gate / "hold-events").unlink()
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, stderr.decode()[-3000:]
    summary = json.loads(stdout)
    missing = summary["meta"]["missing"]
    lost = [m for m in missing if m.startswith(f"{lost_group} ")]
    assert any("queue_stats stats offsets" in m for m in lost), missing
    assert any("consumer_stats" in m for m in lost), missing
    events = [m for m in missing if "controller events" in m]
    assert {m.split(" ", 1)[0] for m in events} == {kept_group, lost_group}, missing
    assert not any(m.startswith(f"{kept_group} ") and "stats" in m for m in missing), missing
    # What was read is reported: the group that answered has its tiering rows.
    tiering = {q["broker_group"] for q in summary["tiering"]["top_queues"]}
    assert kept_group in tiering or summary["tiering"]["queues"] == 0
    html = (out / "latest" / "report.html").read_text()
    assert "Not read (retried, then left out)" in html
    assert f"{lost_group} queue_stats stats offsets" in html
    assert "All healthy" not in html
    # No group's mark advances where something of it was not read (the lost group's
    # stats, and here both groups' controller events): the next run reads them again.
    marks = json.loads((out / "history" / "state" / "meta.json").read_text())["high_water"]
    assert marks == {}
