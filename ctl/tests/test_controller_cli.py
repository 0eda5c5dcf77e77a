"""rocketctl controller/elect against three real controller processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.ctl.cli import main
from rocketcluster.ctl.local.runtime import LocalRuntime

CLUSTER = RocketCluster.model_validate(
    {"metadata": {"name": "cli"}, "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 0}}}
)


def run(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_status_groups_events_and_switchover(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "c")
    state = runtime.up(CLUSTER)
    directory = str(tmp_path / "c")
    try:
        addresses = state["controllers"].split(";")

        async def brokers() -> None:
            client = ControllerClient(addresses, attempts=40)
            try:
                for b in (1, 2, 3):
                    assert (
                        await client.apply_broker_id("cli", "g", b, f"10.2.0.{b}:1", f"k{b}")
                    ).ok
                    await client.heartbeat_all(
                        cpb.BrokerHeartbeat(
                            group="g", broker_id=b, address=f"10.2.0.{b}:1", timeout_ms=60_000
                        )
                    )
            finally:
                await client.close()

        asyncio.run(brokers())
        statuses = run("controller", "status", "--dir", directory)
        assert isinstance(statuses, list) and len(statuses) == 3
        assert len({s["leader"] for s in statuses}) == 1
        # The election scan gives the new group its first master.
        first = run("elect", "--dir", directory, "--group", "g")
        group = first["group"]
        assert group["masterId"] in (1, 2, 3) and group["masterEpoch"] >= 1
        target = next(b for b in (1, 2, 3) if b != group["masterId"])
        refused = CliRunner().invoke(
            main, ["elect", "--dir", directory, "--group", "g", "--broker-id", str(target)]
        )
        assert refused.exit_code != 0 and "sync state set" in refused.output  # not in sync: refused
        groups = run("controller", "groups", "--dir", directory)
        assert [g["group"] for g in groups] == ["g"]
        events = run("controller", "events", "--dir", directory, "--group", "g")
        assert [e["command"] for e in events][:3] == ["ApplyBrokerId"] * 3
        assert "ElectMaster" in {e["command"] for e in events}
    finally:
        runtime.down()
