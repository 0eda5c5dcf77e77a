"""``make bench``'s operator case: thousands of RocketTopic objects at once.

A user who keeps topics as resources (GitOps) applies them all at once, and the
operator resumes all of them whenever it restarts. This starts the API server
emulator, the pod realiser and the real operator with a small cluster (three
controllers, one broker), creates ``--objects`` RocketTopic objects through the API,
and measures until every one is Ready (in the catalogue and served by the broker):
the time until all are Ready, how long each waited (p50/p99/max, seen by polling),
the catalogue commands they cost (the catalogue version's rise: one per batch, not
one per object), and the CPU the operator and the emulator spent. Then it restarts
the operator and measures the resume of them all, which must change nothing.

    python -m rocketcluster.e2e.k8s.catalogue_bench --objects 10000 --out bench/results

Prints a few lines and writes ``operator-crds-<time>.json`` (``--json``: the JSON on
stdout instead of the lines).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.client.admin import AdminClient
from rocketcluster.api.client.controller_admin import ControllerAdmin
from rocketcluster.ctl.bench.results import write_results
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition

REPO = Path(__file__).resolve().parents[5]
CLUSTER = "crds"
POLL_S = 2.0


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": kube.API_VERSION,
        "kind": "RocketCluster",
        "metadata": {"name": name},
        "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 1, "replicas": 1}},
    }


def topic_objects(prefix: str, count: int, cluster: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": kube.API_VERSION,
            "kind": "RocketTopic",
            "metadata": {"name": f"{prefix}-{i:05d}", "labels": {"bulk": prefix}},
            "spec": {"cluster": cluster, "queues": 8},
        }
        for i in range(count)
    ]


def percentile(values: list[float], q: float) -> float:
    """Pure: the nearest-rank ``q`` quantile (0..1) of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Waited:
    seconds: float  # until every object was Ready
    per_object: list[float]  # created (or resumed) until first seen Ready


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timestamp(text: str) -> float:
    """An RFC 3339 timestamp of the API server (``creationTimestamp``), as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Bulk:
    """``count`` RocketTopic objects for ``cluster``, applied with kubectl as a user
    does (one ``kubectl apply`` of them all), on any backend."""

    def __init__(
        self, cluster: OperatedCluster, prefix: str, count: int, say: Callable[[str], None]
    ) -> None:
        self.cluster = cluster
        self.backend = cluster.backend
        self.objects = topic_objects(prefix, count, cluster.name)
        self.prefix = prefix
        self.names = {o["metadata"]["name"] for o in self.objects}
        self.say = say

    def controllers(self) -> ControllerAdmin:
        return ControllerAdmin([f"{ip}:{ADMIN_PORT}" for ip in self.cluster.member_ips(3)])

    def catalogue_version(self) -> int:
        with self.controllers() as admin:
            return int(admin.catalogue()["version"])

    def apply(self) -> float:
        started = time.monotonic()
        documents = "\n---\n".join(json.dumps(o) for o in self.objects)
        self.backend.kubectl(
            "apply", "-n", self.backend.namespace, "-f", "-", input=documents, timeout=3600
        )
        return time.monotonic() - started

    def ready_now(self) -> dict[str, float]:
        """Every Ready object of the bulk (of its current generation): its creation
        time (epoch seconds)."""
        ready: dict[str, float] = {}
        for item in self.backend.objects("rockettopic", f"bulk={self.prefix}"):
            status = item.get("status") or {}
            found = condition(status, "Ready")
            current = status.get("observedGeneration") == item["metadata"].get("generation")
            if found and found["status"] == "True" and current:
                ready[item["metadata"]["name"]] = _timestamp(item["metadata"]["creationTimestamp"])
        return ready

    def wait_ready(self, timeout_s: float, what: str) -> Waited:
        """Until every object is Ready; how long each waited from its creation until
        first seen Ready (seconds, at the poll's resolution)."""
        started = time.monotonic()
        seen: dict[str, float] = {}
        last_said = started
        while True:
            now, wall = time.monotonic(), time.time()
            for name, created in self.ready_now().items():
                seen.setdefault(name, wall - created)
            if len(seen) >= len(self.names):
                return Waited(now - started, list(seen.values()))
            if now - started > timeout_s:
                raise TimeoutError(
                    f"{what}: {len(seen):,} of {len(self.names):,} Ready after {timeout_s:.0f}s"
                )
            if now - last_said >= 10:
                elapsed = now - started
                self.say(f"  {what}: {len(seen):,} of {len(self.names):,} Ready ({elapsed:.0f}s)")
                last_said = now
            time.sleep(POLL_S)

    def served_by_every_broker(self) -> int:
        """How many of the bulk's topics the broker that lists fewest of them lists
        (paged admin API of every broker pod)."""
        counts = []
        for pod in self.cluster.pods({kube.LABEL_COMPONENT: kube.COMPONENT_BROKER}):
            with AdminClient(f"{pod['status']['podIP']}:{ADMIN_PORT}") as admin:
                counts.append(sum(1 for t in admin.topics() if t["name"] in self.names))
        return min(counts, default=0)

    def resumed(self, log: Path) -> int:
        """How many of the bulk's objects a restarted operator has handled: it logs
        "[RocketTopic namespace/name] Resuming is processed" when an object's resume
        handlers are done ("Creation is processed" for an object whose creation kopf
        had not recorded as handled when the operator before it stopped)."""
        text = log.read_text(errors="replace") if log.exists() else ""
        prefix = re.escape(self.prefix)
        mark = re.compile(
            rf"\[RocketTopic [^/\]]+/({prefix}-\d+)\] (?:Resuming|Creation) is processed"
        )
        return len({m.group(1) for m in mark.finditer(text)} & self.names)

    def wait_resumed(self, log: Path, timeout_s: float) -> float:
        started = time.monotonic()
        last_said = started
        total = len(self.names)
        while (done := self.resumed(log)) < total:
            elapsed = time.monotonic() - started
            if elapsed > timeout_s:
                raise TimeoutError(f"resume: {done:,} of {total:,} after {timeout_s:.0f}s")
            if time.monotonic() - last_said >= 10:
                self.say(f"  resume: {done:,} of {total:,} handled ({elapsed:.0f}s)")
                last_said = time.monotonic()
            time.sleep(POLL_S)
        return time.monotonic() - started


def measure_apply(bulk: Bulk, timeout_s: float, operator_pid: int | None) -> dict[str, Any]:
    """Apply the bulk and wait until every object is Ready and served."""
    version_before = bulk.catalogue_version()
    cpu_before = cpu_seconds(operator_pid) if operator_pid else 0.0
    took = bulk.apply()
    bulk.say(f"kubectl apply of {len(bulk.names):,} RocketTopic objects took {took:.1f}s")
    waited = bulk.wait_ready(timeout_s, "apply")
    commands = bulk.catalogue_version() - version_before
    result: dict[str, Any] = {
        "objects": len(bulk.names),
        "kubectlApplySeconds": round(took, 1),
        "allReadySeconds": round(took + waited.seconds, 1),
        "perObjectSeconds": summary(waited.per_object),
        "catalogueCommands": commands,
        "servedByEveryBroker": bulk.served_by_every_broker(),
    }
    if operator_pid:
        result["operatorCpuSeconds"] = round(cpu_seconds(operator_pid) - cpu_before, 1)
    bulk.say(
        f"all Ready {result['allReadySeconds']:.0f}s after the apply began; each waited "
        f"p50 {result['perObjectSeconds']['p50']:.1f}s, p99 "
        f"{result['perObjectSeconds']['p99']:.1f}s; {commands} catalogue commands "
        f"(version {version_before} -> {version_before + commands}); every broker serves "
        f"{result['servedByEveryBroker']:,} of them"
    )
    return result


def measure_resume(bulk: Bulk, backend: EmulatedBackend, timeout_s: float) -> dict[str, Any]:
    """Restart the operator: it resumes every object, which must change nothing."""
    version_before = bulk.catalogue_version()
    log = backend.restart_operator()
    took = bulk.wait_resumed(log, timeout_s)
    result = {
        "seconds": round(took, 1),
        "catalogueCommands": bulk.catalogue_version() - version_before,
        "operatorCpuSeconds": round(cpu_seconds(backend.operator.pid), 1),
        "stillReady": len(bulk.ready_now()),
    }
    bulk.say(
        f"operator restarted: every object resumed in {took:.0f}s, "
        f"{result['catalogueCommands']} catalogue changes, {result['stillReady']:,} of "
        f"{len(bulk.names):,} still Ready"
    )
    return result


def run(
    objects: int, directory: Path, timeout_s: float, say: Callable[[str], None]
) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    say(f"starting the API server emulator, the pod realiser and the operator ({directory})")
    with EmulatedBackend(directory, REPO / "crds") as backend:
        cluster = OperatedCluster(backend, CLUSTER)
        path = directory / "cluster.json"
        path.write_text(json.dumps(manifest(CLUSTER)))
        ready = steps.apply_until_ready(cluster, path)
        say(f"cluster {CLUSTER} Ready after {ready.seconds:.0f}s (3 controllers, 1 broker)")
        bulk = Bulk(cluster, "bench", objects, say)
        applied = measure_apply(bulk, timeout_s, backend.operator.pid)
        resumed = measure_resume(bulk, backend, timeout_s)
    return {"apply": applied, "resume": resumed}


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.5), 2),
        "p99": round(percentile(values, 0.99), 2),
        "max": round(max(values, default=0.0), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument(
        "--dir", type=Path, default=None, help="working directory (default: a temporary one)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds until all Ready")
    parser.add_argument("--json", action="store_true", help="the JSON on stdout")
    args = parser.parse_args(argv)
    if args.objects < 1:
        parser.error("--objects must be at least 1")

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    if args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        parser.error(f"--dir {args.dir} is not empty (another run's?): remove it or name another")
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rocketcluster-crd-bench-"))
    # SIGTERM (or SIGINT, which a shell ignores in background jobs) unwinds through the
    # backend's exit: the emulator, the realiser's pods and the operator are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args.objects, directory, args.timeout, say)
    path = write_results(args.out, "operator-crds", result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
