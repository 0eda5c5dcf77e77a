"""One monitored cluster and one real Prometheus for the whole monitoring suite.

The cluster is ``examples/cluster.yaml`` (three controllers, two broker groups of
three replicas) with replication tightened to ``inSyncReplicas`` =
``minInSyncReplicas`` = 3: the master shrinks its SyncStateSet once a slave has not
caught up for ``haMaxTimeSlaveNotCatchup``, so one stopped slave leaves its group
with 2 in-sync replicas, below the minimum — what the SyncStateSet alert compares.
The other group keeps serving, so traffic goes on throughout. The official client
produces and consumes continuously; one consumer group never acknowledges, so its
messages reach the dead-letter queue. The canary (``rocketctl canary --dir``) probes
both groups: the degraded one fails from the moment its slave stops (its sends cannot
reach three in-sync replicas), the other stays ok. Prometheus (the Debian package's
binary, our own process) scrapes every broker, controller and the canary every second
and evaluates the rules file the chart ships, every second.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.canary.cli import running_canary
from rocketcluster.ctl.console_cli import free_port
from rocketcluster.ctl.workload import Cluster, Workload, running
from rocketcluster.e2e.prometheus import (
    PrometheusAPI,
    PrometheusServer,
    PrometheusUnavailable,
    find_binary,
    prometheus_config,
    render_config,
)
from rocketcluster.operator.monitoring.conventions import CANARY_JOB

from .traffic import Consumers

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cluster.yaml"
RULES = REPO / "charts" / "rocketcluster-operator" / "rules" / "rocketcluster.rules.yaml"
ACKING_GROUP = "billing"
NEVER_ACKING_GROUP = "never-acks"
# The canary probes each group this often; a probe fails after this long.
CANARY_INTERVAL_S = 2.0
CANARY_TIMEOUT_S = 5.0


def monitored_cluster() -> RocketCluster:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    spec["metadata"]["name"] = "monitored"
    spec["spec"]["brokers"]["replication"].update({"inSyncReplicas": 3, "minInSyncReplicas": 3})
    spec["spec"]["consumerGroups"].append({"name": NEVER_ACKING_GROUP, "maxDeliveryAttempts": 1})
    return RocketCluster.model_validate(spec)


@dataclass
class Monitored:
    cluster: Cluster
    prometheus: PrometheusServer
    api: PrometheusAPI
    workload: Workload
    consumers: Consumers
    degraded_group: str  # its slave is stopped
    healthy_group: str
    stopped_slave: str
    stopped_at: float

    def quiet(self) -> None:
        """Stop producing and consuming, for a test that has only to wait (an alert's
        ``for:``): the traffic costs the machine about a core, and nothing left to
        happen needs it. The module's later tests see no traffic."""
        self.consumers.stop()
        self.workload.stop()

    def traffic_summary(self) -> str:
        errors = {**self.workload.errors, **self.consumers.errors}
        return (
            f"acked sends {len(self.workload.acked)}, send failures "
            f"{len(self.workload.failures)}, received {self.consumers.received}, "
            f"client errors {dict(sorted(errors.items(), key=lambda e: -e[1])[:5])}"
        )


def canary_scrape_job(address: str, cluster: str) -> dict[str, Any]:
    """The canary's scrape job, as the operator's PodMonitor makes it: job
    ``rocketcluster-canary``, the cluster as a target label, the canary's own
    ``group`` labels kept."""
    return {
        "job_name": CANARY_JOB,
        "metrics_path": "/metrics",
        "honor_labels": True,
        "static_configs": [{"targets": [address], "labels": {"cluster": cluster}}],
    }


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    try:
        return find_binary("prometheus")
    except PrometheusUnavailable as exc:
        pytest.fail(
            f"the monitoring suite needs a real Prometheus: {exc} (`make debs` installs "
            "Debian's prometheus package)"
        )


@pytest.fixture(scope="session")
def rules_file() -> Path:
    if not RULES.exists():
        pytest.fail(
            f"{RULES} is missing: generate it with "
            "`.venv/bin/python -m rocketcluster.operator.monitoring.generate`"
        )
    return RULES


# Module scope: the cluster and its full-speed workload stop when the monitoring
# tests are done. A session fixture lived until the xdist worker finished everything
# else: ~10 CPU-minutes of produce and consume nobody looked at.
@pytest.fixture(scope="module")
def monitored(
    tmp_path_factory: pytest.TempPathFactory, prometheus_binary: Path, rules_file: Path
) -> Iterator[Monitored]:
    root = tmp_path_factory.mktemp("monitoring")
    with running(root / "cluster", monitored_cluster()) as cluster:
        degraded = cluster.group  # the first group: Cluster's helpers look at it
        healthy = next(g for g in cluster.state["groupEndpoints"] if g != degraded)
        Cluster(cluster.runtime, cluster.state, group=healthy).wait_in_sync(3)
        workload = Workload(cluster.endpoints)
        consumers = Consumers(cluster.endpoints, ACKING_GROUP, NEVER_ACKING_GROUP)
        config = prometheus_config(cluster.state, rule_files=[rules_file])
        canary_port = free_port()
        config["scrape_configs"].append(
            canary_scrape_job(f"127.0.0.1:{canary_port}", cluster.state["name"])
        )
        prometheus = PrometheusServer(root / "prometheus", render_config(config), prometheus_binary)
        workload.start()
        consumers.start()
        beside = contextlib.ExitStack()  # the canary: stopped by its PID at the end
        try:
            beside.enter_context(
                running_canary(
                    cluster.runtime.directory,
                    canary_port,
                    interval=CANARY_INTERVAL_S,
                    timeout=CANARY_TIMEOUT_S,
                )
            )
            prometheus.start()
            with prometheus.api() as api:
                targets = sum(len(j["static_configs"]) for j in config["scrape_configs"])
                api.wait_targets_up(targets, timeout=90)
                master = cluster.master()
                slave = next(b for b in cluster.brokers() if b["name"] != master["name"])
                cluster.runtime.pause(slave["name"])  # SIGSTOP: a stopped slave
                yield Monitored(
                    cluster=cluster,
                    prometheus=prometheus,
                    api=api,
                    workload=workload,
                    consumers=consumers,
                    degraded_group=degraded,
                    healthy_group=healthy,
                    stopped_slave=slave["name"],
                    stopped_at=time.monotonic(),
                )
        finally:
            consumers.stop()
            workload.stop()
            prometheus.stop()
            beside.close()
    shutil.rmtree(root, ignore_errors=True)  # a few hundred MB of segments and TSDB
