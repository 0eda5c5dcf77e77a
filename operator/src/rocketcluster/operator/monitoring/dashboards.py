"""The Grafana dashboards: the cluster at a glance, broker groups and replication,
clients, consumer lag, the controllers' Raft group, the store and tiered storage.

Queries use RocketMQ 5's metric names; broker series carry ``cluster``, ``group`` and
``node_id``, controller series ``cluster`` and ``node_id``. Thresholds match the
alert rules where one watches the same quantity, so a panel turns red where an alert
fires. Built with Grafana's foundation SDK (a development dependency): ``generate``
writes the JSON the chart and the operator ship; nothing at run time imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from rocketcluster.operator.monitoring.boards import cluster, storage, traffic

BUILDERS: Final[tuple[Callable[[], dict[str, Any]], ...]] = (
    cluster.overview,
    cluster.replication,
    traffic.clients,
    traffic.consumer_lag,
    cluster.controller,
    storage.store,
    storage.tiered_storage,
)


def all_dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard by file name (``<uid>.json``), in the order above."""
    built = [make() for make in BUILDERS]
    return {f"{b['uid']}.json": b for b in built}
