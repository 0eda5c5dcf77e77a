"""A Prometheus configuration for a local cluster, made from its ``cluster.json``.

Pure: the state ``LocalRuntime.up`` returns (or ``DIR/cluster.json`` holds) in, a
configuration dict out. One static target per broker and controller process, on its
admin port (``/metrics``), with the labels the alert rules and dashboards expect of a
scrape (:mod:`rocketcluster.operator.monitoring.conventions`): ``job`` per component,
``pod`` per process, and ``cluster`` and (brokers) ``group``, so that ``up`` — which
carries target labels only — names the cluster and group of a broker that is down.
The processes' own series carry ``cluster`` (and ``group``) already: ``honor_labels``
keeps theirs rather than renaming them ``exported_cluster``. The group endpoints
process (role ``proxy``) serves no Prometheus metrics and is not scraped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rocketcluster.operator.monitoring.conventions import BROKER_JOB, CONTROLLER_JOB

# The ``job`` label per process role.
JOBS: Mapping[str, str] = {"broker": BROKER_JOB, "controller": CONTROLLER_JOB}
UNSCRAPED_ROLES = frozenset({"proxy"})  # the local group endpoints: no /metrics


class ConfigError(ValueError):
    """The cluster state cannot be turned into a scrape configuration."""


@dataclass(frozen=True)
class ScrapeTarget:
    job: str
    address: str  # host:port of the admin server
    pod: str  # the process name, the pod's name in Kubernetes
    cluster: str
    group: str = ""  # brokers: the broker group

    def static_config(self) -> dict[str, Any]:
        labels = {"pod": self.pod, "cluster": self.cluster}
        if self.group:
            labels["group"] = self.group
        return {"targets": [self.address], "labels": labels}


def scrape_targets(state: Mapping[str, Any], jobs: Mapping[str, str] = JOBS) -> list[ScrapeTarget]:
    """Every broker and controller process of ``state`` (a ``cluster.json``). A
    replica of broker group G is named ``G-<replica>`` by the local runtime's plan."""
    processes = state.get("processes") if isinstance(state, Mapping) else None
    if not isinstance(processes, list) or not processes:
        raise ConfigError(
            "the cluster state has no processes: pass what `rocketctl local up` wrote "
            "to DIR/cluster.json (a running cluster)"
        )
    cluster = state.get("name") if isinstance(state, Mapping) else None
    if not isinstance(cluster, str) or not cluster:
        raise ConfigError("the cluster state has no name: pass the whole DIR/cluster.json")
    targets = []
    for i, proc in enumerate(processes):
        try:
            name, role, admin = proc["name"], proc["role"], proc["addresses"]["admin"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"process #{i} of the cluster state lacks {exc}: each needs name, role "
                "and addresses.admin"
            ) from exc
        if role in UNSCRAPED_ROLES:
            continue
        if role not in jobs:
            known = ", ".join(sorted({*jobs, *UNSCRAPED_ROLES}))
            raise ConfigError(f"process {name!r} has role {role!r}; known roles: {known}")
        host, _, port = str(admin).rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"process {name!r} has admin address {admin!r}; want host:port")
        group = str(name).rpartition("-")[0] if role == "broker" else ""
        targets.append(ScrapeTarget(jobs[role], str(admin), str(name), cluster, group))
    if not targets:
        raise ConfigError("the cluster state has no broker or controller process to scrape")
    return targets


def prometheus_config(
    state: Mapping[str, Any],
    *,
    rule_files: Sequence[Path] = (),
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    jobs: Mapping[str, str] = JOBS,
) -> dict[str, Any]:
    """A whole ``prometheus.yml``: one scrape job per component, the rule files given.
    The scrape timeout equals the interval (Prometheus refuses a longer one)."""
    by_job: dict[str, list[ScrapeTarget]] = {}
    for target in scrape_targets(state, jobs):
        by_job.setdefault(target.job, []).append(target)
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [str(Path(p).resolve()) for p in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "honor_labels": True,
                "static_configs": [t.static_config() for t in targets],
            }
            for job, targets in sorted(by_job.items())
        ],
    }


def render_config(config: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(config), sort_keys=False)
