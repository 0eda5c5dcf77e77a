"""From a manifest to the processes that run it (pure: no processes, no sockets)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.api.broker_config import (
    ADMIN_PORT,
    CLIENT_PORT,
    CONTROLLER_PORT,
    HA_PORT,
    BrokerProcessConfig,
)
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig

MODULES = {"broker": "rocketcluster.broker.main", "controller": "rocketcluster.controller.main"}


@dataclass
class ProcessPlan:
    name: str
    role: str  # "broker" | "controller"
    host: str
    config_path: Path
    log_path: Path
    config: BrokerProcessConfig | ControllerProcessConfig
    ports: dict[str, int] = field(default_factory=dict)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", MODULES[self.role], "--config", str(self.config_path)]

    @property
    def client_endpoint(self) -> str | None:
        if isinstance(self.config, BrokerProcessConfig):
            return self.config.route_endpoint
        return None


class UnsupportedTopology(ValueError):
    pass


def hosts_needed(cluster: RocketCluster) -> int:
    return cluster.spec.controller.replicas + cluster.spec.brokers.groups


def plan_cluster(
    cluster: RocketCluster,
    directory: Path,
    hosts: list[str],
    overrides: dict[str, Any] | None = None,
    controller_overrides: dict[str, Any] | None = None,
) -> list[ProcessPlan]:
    """Controllers (``spec.controller.replicas``) and one broker per group; each
    process on its own loopback address with the standard ports."""
    controllers = cluster.spec.controller.replicas
    plans = plan_controllers(cluster, directory, hosts[:controllers], controller_overrides)
    plans += plan_standalone(cluster, directory, hosts[controllers:], overrides)
    return plans


def plan_controllers(
    cluster: RocketCluster,
    directory: Path,
    hosts: list[str],
    overrides: dict[str, Any] | None = None,
) -> list[ProcessPlan]:
    members = [
        ControllerMember(
            id=i + 1,
            raft_address=f"{host}:{CONTROLLER_PORT}",
            admin_address=f"{host}:{ADMIN_PORT}",
        )
        for i, host in enumerate(hosts)
    ]
    plans = []
    for i, host in enumerate(hosts):
        name = f"{cluster.name}-controller-{i}"
        settings: dict[str, Any] = {
            "cluster": cluster.name,
            "node_id": i + 1,
            "members": members,
            "data_dir": directory / "data" / name,
            "bind_host": host,
            "unclean_election": cluster.spec.brokers.replication.unclean_election,
        }
        settings.update(overrides or {})
        plans.append(
            ProcessPlan(
                name=name,
                role="controller",
                host=host,
                config_path=directory / "config" / f"{name}.json",
                log_path=directory / "logs" / f"{name}.log",
                config=ControllerProcessConfig.model_validate(settings),
                ports={"raft": CONTROLLER_PORT, "admin": ADMIN_PORT},
            )
        )
    return plans


def plan_standalone(
    cluster: RocketCluster,
    directory: Path,
    hosts: list[str],
    overrides: dict[str, Any] | None = None,
) -> list[ProcessPlan]:
    """One broker per group (``spec.brokers.replicas: 1``)."""
    spec = cluster.spec
    if spec.brokers.replicas != 1:
        raise UnsupportedTopology("this runtime starts one broker per group (brokers.replicas 1)")
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
