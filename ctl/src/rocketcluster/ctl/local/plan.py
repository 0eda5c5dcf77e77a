"""From a manifest to the processes that run it (pure: no processes, no sockets)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, HA_PORT, BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster


@dataclass
class ProcessPlan:
    name: str
    role: str  # "broker" | "controller"
    host: str
    config_path: Path
    log_path: Path
    config: BrokerProcessConfig
    ports: dict[str, int] = field(default_factory=dict)

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rocketcluster.broker.main",
            "--config",
            str(self.config_path),
        ]


class UnsupportedTopology(ValueError):
    pass


def plan_standalone(
    cluster: RocketCluster,
    directory: Path,
    hosts: list[str],
    overrides: dict[str, Any] | None = None,
) -> list[ProcessPlan]:
    """One broker per group, no controller: ``spec.controller.replicas: 0``."""
    spec = cluster.spec
    if spec.controller.replicas != 0 or spec.brokers.replicas != 1:
        raise UnsupportedTopology(
            "this runtime starts standalone brokers (controller.replicas 0, brokers.replicas 1)"
        )
    plans = []
    for index in range(spec.brokers.groups):
        name = cluster.broker_group_name(index)
        host = hosts[index]
        settings: dict[str, Any] = {
            "cluster": cluster.name,
            "group": name,
            "broker_id": 0,
            "data_dir": directory / "data" / name,
            "bind_host": host,
            "advertised_host": host,
            "client_port": CLIENT_PORT,
            "admin_port": ADMIN_PORT,
            "ha_port": HA_PORT,
            "flush": spec.brokers.flush,
            "max_message_bytes": spec.brokers.max_message_bytes,
            "retention_hours": spec.brokers.retention_hours,
            "auto_create_topics": spec.brokers.auto_create_topics,
            "replication": spec.brokers.replication,
            "topics": spec.topics,
            "consumer_groups": spec.consumer_groups,
        }
        settings.update(overrides or {})
        config = BrokerProcessConfig.model_validate(settings)
        plans.append(
            ProcessPlan(
                name=name,
                role="broker",
                host=host,
                config_path=directory / "config" / f"{name}.json",
                log_path=directory / "logs" / f"{name}.log",
                config=config,
                ports={"client": CLIENT_PORT, "admin": ADMIN_PORT},
            )
        )
    return plans
