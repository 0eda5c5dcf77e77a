"""rocketctl local up/down and the admin verbs, against a real broker process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from rocketcluster.ctl.cli import main
from rocketcluster.ctl.local.runtime import LocalRuntime, LocalRuntimeError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "standalone.yaml"


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_up_admin_verbs_and_down(tmp_path: Path) -> None:
    directory = str(tmp_path / "cluster")
    run("local", "up", "-f", str(EXAMPLE), "--dir", directory)
    try:
        state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
        [broker] = state["processes"]
        assert state["clientEndpoints"] == broker["addresses"]["client"]
        assert broker["role"] == "broker" and broker["name"] == "demo-broker-0"
        assert os.path.exists(f"/proc/{broker['pid']}")
        # A second `up` on the same directory refuses instead of starting twins.
        second = CliRunner().invoke(main, ["local", "up", "-f", str(EXAMPLE), "--dir", directory])
        assert second.exit_code != 0 and "already running" in second.output

        topics = json.loads(run("topic", "--dir", directory, "list"))
        assert {t["name"] for t in topics} >= {"orders", "payments", "reminders", "transfers"}
        created = json.loads(
            run("topic", "--dir", directory, "create", "audit", "--queues", "2", "--type", "FIFO")
        )
        assert created["messageType"] == "FIFO"
        shown = json.loads(run("topic", "--dir", directory, "show", "audit"))
        assert [q["queueId"] for q in shown["queueOffsets"]] == [0, 1]
        run(
            "group",
            "--dir",
            directory,
            "create",
            "auditors",
            "--fifo",
            "--max-delivery-attempts",
            "3",
        )
        groups = {g["name"]: g for g in json.loads(run("group", "--dir", directory, "list"))}
        assert groups["auditors"]["fifo"] and groups["auditors"]["maxDeliveryAttempts"] == 3
        failed = CliRunner().invoke(main, ["topic", "--dir", directory, "show", "missing"])
        assert failed.exit_code != 0 and "404" in failed.output
        stats = json.loads(run("stats", "--dir", directory))
        assert stats["commitLog"]["maxOffset"] == 0 and stats["recovery"]["quarantined"] == []

        admin = f"http://{broker['addresses']['admin']}"
        spec = httpx.get(f"{admin}/openapi.json").json()
        assert "/v1/topics" in spec["paths"] and "/v1/messages/{message_id}" in spec["paths"]
        metrics = httpx.get(f"{admin}/metrics").text
        assert 'rocketmq_topic_number{cluster="demo"' in metrics
        assert httpx.get(f"{admin}/readyz").status_code == 200
        status = json.loads(run("local", "status", "--dir", directory))
        assert status["processes"][0]["running"]
    finally:
        out = run("local", "down", "--dir", directory)
    assert "demo-broker-0" in out
    assert not (tmp_path / "cluster" / "cluster.json").exists()
    assert "nothing was running" in run("local", "down", "--dir", directory)


def test_bad_manifest_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: rocketcluster.io/v1alpha1\nkind: RocketCluster\nmetadata: {name: x}\n"
        "spec:\n  topics:\n    - {name: 'has space'}\n"
    )
    result = CliRunner().invoke(main, ["local", "up", "-f", str(bad), "--dir", str(tmp_path / "d")])
    assert result.exit_code != 0
    assert "spec.topics.0.name" in result.output


def test_a_process_that_dies_at_start_is_reported_at_once(tmp_path: Path) -> None:
    """The runtime judges its own children by their exit status: one that exits at
    start is named with its log at once, not after the ready timeout (and a live one
    is never taken for dead while it is still exec'ing)."""
    runtime = LocalRuntime(tmp_path / "dies")
    started = time.monotonic()
    with pytest.raises(LocalRuntimeError, match="demo-broker-0 exited during start"):
        runtime.up(EXAMPLE, timeout=60, argv_prefix=lambda plan: ["/bin/false"])
    assert time.monotonic() - started < 30
    assert runtime.running() == []
