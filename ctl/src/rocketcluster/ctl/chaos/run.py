"""Run the chaos suite: ``python -m rocketcluster.ctl.chaos.run --scenarios fixed|soak
--seed S --duration SECONDS --out DIR``.

The runner first makes sure iptables is there (installing it needs the network, so
before anything is contained), then runs itself again under ``unshare --mount --net
--pid --fork --mount-proc`` with a tmpfs on /run/netns: whatever happens, when the
run ends the kernel ends every process it started and every namespace vanishes. It
still cleans up on its own. Inside, each controller and broker runs in its own
network namespace (``netns``); the workload, the group endpoints and the checker
stay in the runner's. Where namespaces cannot be had, only kill and pause faults run,
on loopback, every network fault is reported as SKIPPED — loudly — and the run fails
unless ``--loopback`` asked for exactly that.

Output in DIR: ``history.jsonl``, ``summary.json``, ``timeline.png`` and the
processes' logs. Exit status 1 when anything acknowledged was lost, anything
unexpected was delivered, an offset was inconsistent, FIFO order broke, or the
cluster did not come back whole after the final heal.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.chaos import netns
from rocketcluster.ctl.chaos.checker import check
from rocketcluster.ctl.chaos.drain import DrainWatch
from rocketcluster.ctl.chaos.episodes import EpisodeRunner, wait_healthy
from rocketcluster.ctl.chaos.faults import Injector
from rocketcluster.ctl.chaos.history import History
from rocketcluster.ctl.chaos.report import print_summary, skipped_banner
from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.chaos.schedule import fixed, soak
from rocketcluster.ctl.chaos.timeline import render
from rocketcluster.ctl.chaos.workload import (
    AUDIT_GROUP,
    FIFO_GROUP,
    FIFO_TOPIC,
    NORMAL_GROUP,
    NORMAL_TOPIC,
    OFFICIAL_GROUP,
    OFFICIAL_TOPIC,
    SUBSCRIPTIONS,
    Workload,
    WorkloadConfig,
)
from rocketcluster.ctl.local.plan import ProcessPlan, plan_cluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, quiet_official_client

log = logging.getLogger("rocketcluster.chaos")

CONTAINED_ENV = "ROCKETCLUSTER_CHAOS_CONTAINED"
REPLICAS = 3
BROKER_OVERRIDES: dict[str, Any] = {
    "segment_size": 16 << 20,
    **DISK_GUARDS_OFF,  # the audit's history must not depend on the host's disk
    "messaging": {"consumeStatePersistMs": 200},
}
WARMUP_S = 5.0


def chaos_cluster(groups: int) -> RocketCluster:
    """3 controllers; groups of 3 replicas acknowledging on 2 (sync); a NORMAL and a
    FIFO topic, a consumer group for each (FIFO for FIFO) and one for the audit."""
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "chaos"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": groups,
                    "replicas": REPLICAS,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                    # Every broker as a store process behind two fronts: the faults
                    # (kill-front among them) meet the shape of a multi-core pod.
                    "frontProcesses": 2,
                },
                "topics": [
                    {"name": NORMAL_TOPIC, "queues": 4},
                    {"name": FIFO_TOPIC, "queues": 4, "messageType": "FIFO"},
                    {"name": OFFICIAL_TOPIC, "queues": 4},
                ],
                "consumerGroups": [
                    {"name": NORMAL_GROUP},
                    {"name": FIFO_GROUP, "fifo": True},
                    {"name": AUDIT_GROUP},
                    {"name": OFFICIAL_GROUP},
                ],
            },
        }
    )


def workload_config(endpoints: dict[str, str]) -> WorkloadConfig:
    """The same load whatever the number of groups (two NORMAL producers and four FIFO
    message groups in all, at least one of each per group): more groups spread it."""
    groups = max(1, len(endpoints))
    return WorkloadConfig(
        endpoints, normal_producers=max(1, 2 // groups), message_groups=max(1, 4 // groups)
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The rocketcluster chaos suite.")
    parser.add_argument("--scenarios", choices=("fixed", "soak"), default="fixed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=600.0, help="soak seconds of faults")
    parser.add_argument("--groups", type=int, default=2, help="broker groups")
    parser.add_argument("--out", type=Path, default=Path("e2e/chaos/reports/latest"))
    parser.add_argument("--loopback", action="store_true", help="no namespaces: kill/pause only")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's data directory")
    parser.add_argument(
        "--only", default="", help="fixed: run only these fault kinds (comma-separated)"
    )
    return parser.parse_args(argv)


def contain(argv: list[str]) -> int:
    """Run this module again inside new mount, network and PID namespaces. ``sh``
    stays PID 1 there (it reaps orphans); when it exits, everything inside dies."""
    Path("/run/netns").mkdir(parents=True, exist_ok=True)
    script = 'mount -t tmpfs rcchaos /run/netns && "$@"'
    command = [
        "unshare",
        "--mount",
        "--net",
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        "-m",
        "rocketcluster.ctl.chaos.run",
        *argv,
    ]
    env = {**os.environ, CONTAINED_ENV: "1"}
    return subprocess.run(command, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The official client reports every failed heartbeat with a traceback through
    # concurrent.futures; under faults that is expected and drowns the run's log.
    logging.getLogger("concurrent.futures").setLevel(logging.CRITICAL)
    quiet_official_client()
    problem: str | None = "--loopback given" if args.loopback else None
    if problem is None and not os.environ.get(CONTAINED_ENV):
        problem = netns.ensure_iptables() or netns.namespaces_usable()
        if problem is None:
            return contain(raw)
    if problem is not None:
        print(skipped_banner(problem), flush=True)
    return Run(args, problem).execute()


class Run:
    def __init__(self, args: argparse.Namespace, network_problem: str | None) -> None:
        self.args = args
        self.network_problem = network_problem
        self.out: Path = args.out.resolve()
        # Two groups: consumers that choose a group per receive (the official ones)
        # and faults that move traffic from one group to another need more than one.
        self.groups = args.groups
        self.notes: list[str] = []

    def _network(self, cluster: RocketCluster, work: Path) -> tuple[netns.Network, list[str]]:
        network = netns.Network()
        self.notes += network.sweep()
        # The plan is pure: ask it for the process names (all but the group endpoints,
        # which stay in the runner's namespace), then give each its own namespace.
        placeholder = [f"{netns.SUBNET}.{10 + i}" for i in range(64)]
        names = [p.name for p in plan_cluster(cluster, work, placeholder) if p.role != "proxy"]
        nodes = network.build(names)
        hosts = [nodes[n].address for n in names] + [netns.RUNNER_ADDRESS]
        return network, hosts

    def execute(self) -> int:
        args = self.args
        started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        for stale in ("history.jsonl", "summary.json", "timeline.png"):
            (self.out / stale).unlink(missing_ok=True)
        shutil.rmtree(self.out / "logs", ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="rcchaos-"))
        history = History(self.out / "history.jsonl")
        cluster = chaos_cluster(self.groups)
        runtime = LocalRuntime(work / "cluster")
        network: netns.Network | None = None
        healthy_at_end = False
        episodes_run: list[str] = []
        unhealthy: list[str] = []
        audit_complete = False
        workloads: list[Workload] = []
        try:
            hosts: list[str] | None = None
            prefix = None
            if self.network_problem is None:
                network, hosts = self._network(cluster, work / "cluster")
                nodes = {n.address: n for n in network.nodes.values()}

                def prefix_of(plan: ProcessPlan) -> list[str]:
                    node = nodes.get(plan.host)
                    return node.exec_prefix if node else []

                prefix = prefix_of
            state = runtime.up(cluster, overrides=BROKER_OVERRIDES, hosts=hosts, argv_prefix=prefix)
            probe = ClusterProbe(runtime, REPLICAS)
            wait_healthy(probe, 120, history, "start")
            history.append("info", "note", event="cluster", groups=state["groupEndpoints"])
            workload = Workload(workload_config(dict(state["groupEndpoints"])), history)
            workloads.append(workload)
            workload.start()
            time.sleep(WARMUP_S)
            injector = Injector(runtime, probe, network, self.network_problem)
            drain = DrainWatch(probe, SUBSCRIPTIONS, quiesce=workload.producers_paused)
            runner = EpisodeRunner(injector, probe, history, drain)
            schedule = fixed() if args.scenarios == "fixed" else soak(args.seed, groups=self.groups)
            if args.only:
                kinds = set(args.only.split(","))
                schedule = [
                    e for e in fixed() if any(t.fault.kind.value in kinds for t in e.faults)
                ]
            faults_began = time.monotonic()
            for episode in schedule:
                if args.scenarios == "soak" and time.monotonic() - faults_began >= args.duration:
                    break
                episodes_run.append(episode.describe())
                if not runner.run(episode, settle_s=60.0):
                    unhealthy.append(episode.describe())
            self.notes += injector.heal_everything()
            history.append("info", "note", event="final-heal")
            healthy_at_end = wait_healthy(probe, 180, history, "final")
            time.sleep(2.0)
            workload.stop_producers()
            time.sleep(6.0)  # in-flight sends complete or time out
            drained = workload.drain(quiet_s=workload.config.invisible_ms / 1000 + 4, timeout_s=90)
            history.append("info", "note", event="drained", quiet=drained)
            audit_complete = workload.audit(timeout_s=120, want=workload.acked)
            history.append("info", "note", event="audited", complete=audit_complete)
            probe.close()
        finally:
            for w in workloads:
                w.close()
            runtime.down()
            if network is not None:
                left = network.rule_count()
                if left:
                    self.notes.append(f"{left} fault rules were still in place at teardown")
                network.teardown()
            history.close()
            self._keep_logs(work)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        return self._report(
            history, started, healthy_at_end, episodes_run, unhealthy, audit_complete
        )

    def _keep_logs(self, work: Path) -> None:
        logs = work / "cluster" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, self.out / "logs", dirs_exist_ok=True)

    def _report(
        self,
        history: History,
        started: float,
        healthy_at_end: bool,
        episodes: list[str],
        unhealthy: list[str],
        audit_complete: bool,
    ) -> int:
        records = history.records()
        summary = check(records)
        wall = round(time.monotonic() - started, 1)
        summary["run"] = {
            "scenarios": self.args.scenarios,
            "seed": self.args.seed,
            "duration_requested_s": self.args.duration if self.args.scenarios == "soak" else None,
            "wall_time_s": wall,
            "history_span_s": round(max((r["time"] for r in records), default=0.0), 1),
            "broker_groups": self.groups,
            "replicas": REPLICAS,
            "network_faults": "SKIPPED: " + self.network_problem if self.network_problem else "ran",
            "healthy_at_end": healthy_at_end,
            "audit_complete": audit_complete,
            "episodes": len(episodes),
            "episodes_not_healthy_within_60s": unhealthy,
            "notes": self.notes,
        }
        # Network faults that could not run are a failure, not a pass, unless loopback
        # (kill and pause only) was asked for.
        network_ok = self.network_problem is None or bool(self.args.loopback)
        summary["valid"] = bool(summary["valid"] and healthy_at_end and network_ok)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        span = summary["run"]["history_span_s"]
        title = (
            f"rocketcluster chaos — {self.args.scenarios}, seed {self.args.seed}, "
            f"{self.groups} broker group(s) of {REPLICAS}, {span:.0f}s, "
            f"lost {summary['lost']['count']}, duplicates {summary['duplicates']['count']}"
        )
        render(records, summary["faults"], self.out / "timeline.png", title)
        print_summary(summary, self.out)
        if self.network_problem:
            print(skipped_banner(self.network_problem), flush=True)
        return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
