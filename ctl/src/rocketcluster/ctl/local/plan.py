"""From a manifest to the processes that run it (pure: no processes, no sockets)."""

from __future__ import annotations

import json
import os
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
from rocketcluster.api.process_settings import broker_settings, controller_settings
from rocketcluster.api.tiered_spec import TieredStorageSpec

LOCAL_SEGMENT_SIZE = 64 << 20

MODULES = {
    "broker": "rocketcluster.broker.main",
    "controller": "rocketcluster.controller.main",
    "proxy": "rocketcluster.ctl.local.proxy",
}


@dataclass
class ProxyConfig:
    """The group endpoints of a replicated cluster (one process for all groups)."""

    controllers: list[str]
    groups: dict[str, str]
    admin: str
    # TlsFiles (JSON) when the cluster runs TLS: the proxy's admin serves https and it
    # reads the controllers' admin over https; client traffic passes through as bytes.
    tls: dict[str, str] | None = None
    # security.auth: the controllers' admin API wants this token.
    admin_token_file: str | None = None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, indent=2))


@dataclass
class ProcessPlan:
    name: str
    role: str  # "broker" | "controller"
    host: str
    config_path: Path
    log_path: Path
    config: BrokerProcessConfig | ControllerProcessConfig | ProxyConfig
    ports: dict[str, int] = field(default_factory=dict)
    # Run the process through this first, e.g. ``["ip", "netns", "exec", NS]`` (the
    # chaos suite): it must exec the command, so the pid started is the process's own.
    argv_prefix: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        return [
            *self.argv_prefix,
            sys.executable,
            "-m",
            MODULES[self.role],
            "--config",
            str(self.config_path),
        ]

    @property
    def client_endpoints(self) -> list[str]:
        """What clients should connect to: group endpoints, or standalone brokers."""
        if isinstance(self.config, ProxyConfig):
            return list(self.config.groups.values())
        if isinstance(self.config, BrokerProcessConfig) and not self.config.controllers:
            return [self.config.route_endpoint]
        return []


class UnsupportedTopology(ValueError):
    pass


def replicated(cluster: RocketCluster) -> bool:
    return cluster.spec.controller.replicas > 0 and cluster.spec.brokers.groups > 0


def hosts_needed(cluster: RocketCluster) -> int:
    spec = cluster.spec
    brokers = spec.brokers.groups * (spec.brokers.replicas if replicated(cluster) else 1)
    proxy = 1 if replicated(cluster) else 0
    return spec.controller.replicas + brokers + proxy


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
    rest = hosts[controllers:]
    if replicated(cluster):
        plans += plan_replicated(cluster, directory, plans, rest, overrides)
    else:
        plans += plan_standalone(cluster, directory, rest, overrides)
    return plans


def plan_replicated(
    cluster: RocketCluster,
    directory: Path,
    controllers: list[ProcessPlan],
    hosts: list[str],
    overrides: dict[str, Any] | None,
) -> list[ProcessPlan]:
    """Broker groups of ``spec.brokers.replicas`` each, registered with the
    controllers, behind one group endpoint each (the proxy process)."""
    spec = cluster.spec
    proxy_host = hosts[-1]
    group_names = [cluster.broker_group_name(g) for g in range(spec.brokers.groups)]
    endpoints = {name: f"{proxy_host}:{CLIENT_PORT + 10 * i}" for i, name in enumerate(group_names)}
    controller_addresses = [
        p.config.member(p.config.node_id).raft_address
        for p in controllers
        if isinstance(p.config, ControllerProcessConfig)
    ]
    plans = []
    host_iter = iter(hosts[:-1])
    for group in group_names:
        for replica in range(spec.brokers.replicas):
            host = next(host_iter)
            name = f"{group}-{replica}"
            settings = _broker_settings(cluster, directory, name, group, host)
            settings.update(
                {
                    "broker_id": replica + 1,
                    "controllers": controller_addresses,
                    "group_endpoint": endpoints[group],
                    "route_groups": endpoints,
                }
            )
            settings.update(overrides or {})
            plans.append(
                _broker_plan(name, host, directory, BrokerProcessConfig.model_validate(settings))
            )
    proxy = ProxyConfig(
        controllers=[
            p.config.member(p.config.node_id).admin_address
            for p in controllers
            if isinstance(p.config, ControllerProcessConfig)
        ],
        groups=endpoints,
        admin=f"{proxy_host}:{ADMIN_PORT}",
    )
    plans.append(
        ProcessPlan(
            name=f"{cluster.name}-endpoints",
            role="proxy",
            host=proxy_host,
            config_path=directory / "config" / f"{cluster.name}-endpoints.json",
            log_path=directory / "logs" / f"{cluster.name}-endpoints.log",
            config=proxy,
            ports={
                "admin": ADMIN_PORT,
                **{g: int(e.rpartition(":")[2]) for g, e in endpoints.items()},
            },
        )
    )
    return plans


def local_tiered_storage(spec: TieredStorageSpec, directory: Path) -> TieredStorageSpec:
    """``spec`` with a relative ``posix.path`` made absolute against the local cluster's
    directory (every broker shares it, as the pods of a cluster share one volume).
    ``posix.claimName`` and ``s3.credentialsSecret`` mean nothing here: the brokers
    inherit rocketctl's environment, AWS_* variables included."""
    posix = spec.posix
    if posix is None or Path(posix.path).is_absolute():
        return spec
    path = os.path.abspath(directory / posix.path)
    return spec.model_copy(update={"posix": posix.model_copy(update={"path": path})})


def _broker_settings(
    cluster: RocketCluster, directory: Path, name: str, group: str, host: str
) -> dict[str, Any]:
    return {
        **broker_settings(cluster),
        "group": group,
        "broker_id": 0,
        "data_dir": directory / "data" / name,
        "bind_host": host,
        "advertised_host": host,
        "client_port": CLIENT_PORT,
        "admin_port": ADMIN_PORT,
        "ha_port": HA_PORT,
        # Segments are preallocated: a laptop running many brokers wants smaller ones.
        "segment_size": LOCAL_SEGMENT_SIZE,
    }


def _broker_plan(name: str, host: str, directory: Path, config: BrokerProcessConfig) -> ProcessPlan:
    # After the overrides: a tier a test passes in is resolved like the manifest's.
    config.tiered_storage = local_tiered_storage(config.tiered_storage, directory)
    return ProcessPlan(
        name=name,
        role="broker",
        host=host,
        config_path=directory / "config" / f"{name}.json",
        log_path=directory / "logs" / f"{name}.log",
        config=config,
        ports={"client": CLIENT_PORT, "admin": ADMIN_PORT},
    )


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
            **controller_settings(cluster),
            "node_id": i + 1,
            "members": members,
            "data_dir": directory / "data" / name,
            "bind_host": host,
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
    """One broker per group, no replication (``spec.brokers.replicas: 1``)."""
    spec = cluster.spec
    if spec.brokers.replicas != 1:
        raise UnsupportedTopology(
            "replicated broker groups need controllers (spec.controller.replicas 1, 3 or 5)"
        )
    names = [cluster.broker_group_name(i) for i in range(spec.brokers.groups)]
    endpoints = {name: f"{hosts[i]}:{CLIENT_PORT}" for i, name in enumerate(names)}
    plans = []
    for i, name in enumerate(names):
        settings = _broker_settings(cluster, directory, name, name, hosts[i])
        settings["route_groups"] = endpoints
        settings.update(overrides or {})
        plans.append(
            _broker_plan(name, hosts[i], directory, BrokerProcessConfig.model_validate(settings))
        )
    return plans
