"""The chaos soak with the operator (``make chaos-soak-operated``)::

    python -m rocketcluster.e2e.k8s.chaos_soak --faults 1000 --seed 1 --out DIR [--resume]

The local soak's runner, workload and checker (``rocketcluster.ctl.chaos.run``) on
the emulated backend (:class:`OperatedChaosBackend`): the chaos cluster applied as a
RocketCluster manifest, the operator's two replicas contending for its Lease, the
pods real processes (``chaos_pods``), and ``operated_soak``'s schedule — kills and
pauses of pods and of the operator's leader, and rolling restarts with the operator
killed under them. Network and disk faults need the local soak's namespaces and
volumes and are not drawn here.

The emulator keeps its objects in memory, so its cluster lives one session: each
session ends with its own drain and audit, and ``--resume`` starts a new cluster
that goes on with the schedule, the counts and the history.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import yaml

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.chaos.backend import ChaosCluster
from rocketcluster.ctl.chaos.run import Run, parse, quiet_logs
from rocketcluster.ctl.chaos.schedule import operated_soak
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.chaos_pods import PodProcesses
from rocketcluster.e2e.k8s.operated import OperatedCluster
from rocketcluster.e2e.k8s.steps import apply_until_ready

REPO = Path(__file__).resolve().parents[5]
NOT_HERE = (
    "the emulator's pods share this host's network and disk, so network and disk "
    "faults run on the local soak (make chaos-soak)"
)


def manifest(cluster: RocketCluster) -> dict[str, object]:
    """The chaos cluster as a user's manifest (what ``kubectl apply`` takes)."""
    body = cluster.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return {"apiVersion": cluster.api_version, "kind": "RocketCluster", **body}


class OperatedChaosBackend:
    def __init__(self, crds: Path) -> None:
        self.crds = crds
        self.backend: EmulatedBackend | None = None
        self.operated: OperatedCluster | None = None

    def start(self, cluster: RocketCluster, work: Path) -> ChaosCluster:
        directory = work / "emulated"
        shutil.rmtree(directory, ignore_errors=True)  # an earlier session's cluster
        directory.mkdir(parents=True)
        self.backend = EmulatedBackend(directory, self.crds)
        self.operated = OperatedCluster(self.backend, cluster.metadata.name)
        path = directory / "chaos-cluster.yaml"
        path.write_text(yaml.safe_dump(manifest(cluster), sort_keys=False))
        apply_until_ready(self.operated, path)
        groups = [cluster.broker_group_name(i) for i in range(cluster.spec.brokers.groups)]
        endpoints = {g: self.operated.group_endpoint(g) for g in groups}
        processes = PodProcesses(self.backend, self.operated, endpoints)
        return ChaosCluster(
            processes,
            endpoints,
            network_problem=NOT_HERE,
            volume_problem=NOT_HERE,
            more_health=processes.operator_health,
            durable=False,
        )

    def stop(self) -> list[str]:
        if self.operated is not None:
            self.operated.close()
        if self.backend is not None:
            self.backend.close()
        return []

    def keep_logs(self, out: Path) -> None:
        """The pods' logs and the operator replicas' (the harness directory's)."""
        if self.backend is None:
            return
        harness = self.backend.harness.dir
        logs = out / "logs"
        if (harness / "logs").is_dir():
            shutil.copytree(harness / "logs", logs, dirs_exist_ok=True)
        for log in harness.glob("*.log"):
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, logs / log.name)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.scenarios = "soak"  # this backend runs soaks only
    quiet_logs()
    logging.getLogger("kopf").setLevel(logging.WARNING)
    run = Run(
        args,
        NOT_HERE,
        backend=OperatedChaosBackend(REPO / "crds"),
        schedule=lambda seed, groups: operated_soak(seed, groups=groups),
        allowed_skips=NOT_HERE,
        resume_command="make chaos-soak-operated RESUME=1 OPERATED_OUT={out}",
        label="soak-operated",
    )
    return run.execute()


if __name__ == "__main__":
    sys.exit(main())
