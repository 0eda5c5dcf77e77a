"""The tiered metrics the inventory lists against what real broker processes export
(``rocketctl local``'s runtime, standalone): with tiered storage on a directory, every
name of ``TIERED_METRICS`` and no other ``rocketmq_tiered_*``; without tiered storage,
none of them (which is why the monitored cluster lists them as expected-empty)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import local_broker
from rocketcluster.operator.monitoring import inventory

LABELS = ("cluster", "group", "node_id", "node_type")
_SAMPLE = re.compile(r"^(rocketmq_tiered_\w+)\{([^}]*)\}", re.MULTILINE)


def _cluster(tiered: bool) -> RocketCluster:
    spec: dict[str, Any] = {
        "controller": {"replicas": 0},
        "brokers": {"groups": 1, "replicas": 1},
        "topics": [{"name": "orders", "queues": 1}],
    }
    if tiered:
        spec["tieredStorage"] = {"enabled": True, "backend": "posix", "posix": {"path": "tier"}}
    return RocketCluster.model_validate({"metadata": {"name": "exports"}, "spec": spec})


def _tiered_samples(cluster: RocketCluster, directory: Path) -> list[tuple[str, str]]:
    """(name, labels) of each rocketmq_tiered_* sample the broker exports, but
    prometheus_client's ``*_created`` series (nothing queries them)."""
    with local_broker(cluster, directory) as broker, broker.admin() as admin:
        text = admin.metrics()
    return [(n, labels) for n, labels in _SAMPLE.findall(text) if not n.endswith("_created")]


@pytest.mark.parametrize("tiered", [True, False], ids=["tiered", "without tiering"])
def test_a_broker_exports_the_tiered_metrics_only_with_tiering(
    tiered: bool, tmp_path: Path
) -> None:
    samples = _tiered_samples(_cluster(tiered), tmp_path / "local")
    names = {name for name, _ in samples}
    assert names == (set(inventory.TIERED_METRICS) if tiered else set())
    for name, labels in samples:
        present = {pair.split("=", 1)[0] for pair in labels.split(",")}
        assert set(LABELS) <= present, f"{name} lacks {sorted(set(LABELS) - present)}"
