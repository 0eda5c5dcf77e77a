"""The operator's identity as its Helm chart makes it, on the emulated cluster: the
chart's ServiceAccount, Roles, ClusterRoles and bindings (``helm template`` with the
real helm, applied with the real kubectl), and a kubeconfig that acts as that
ServiceAccount (a token from TokenRequest). A host-process operator started with it
calls the API exactly as the chart's pods would, so in RBAC mode
(``KubeHarness(authorization_mode="RBAC")``) a verb missing from the chart is a 403
in :meth:`KubeHarness.forbidden_report`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rocketcluster.e2e.kube.binaries import ensure_binaries
from rocketcluster.e2e.kube.harness import HarnessError, KubeHarness

CHART = Path(__file__).resolve().parents[5] / "charts" / "rocketcluster-operator"
NAMESPACE = "rocketcluster-system"
# A release named as the chart: its fullname — the ServiceAccount's and the Lease's
# name (leaderElection) — is "rocketcluster-operator", the Lease name a host-process
# operator uses by default (operator/leader.py), so the chart's Lease Role fits it.
RELEASE = "rocketcluster-operator"
IDENTITY_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
HELM_TIMEOUT_S = 120


@dataclass(frozen=True)
class OperatorIdentity:
    namespace: str
    service_account: str
    kubeconfig: Path  # acts as the ServiceAccount
    objects: tuple[Mapping[str, Any], ...]  # what was applied

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def chart_identity_objects(
    directory: Path,
    *,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    values: Mapping[str, Any] | None = None,
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC objects, as ``helm template`` renders them
    (helm's own configuration kept under ``directory``, no cluster contacted)."""
    home = directory / "helm-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(home / "no-kubeconfig"),
    )
    done = subprocess.run(
        [
            str(ensure_binaries().helm),
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            "-f",
            "-",
        ],
        input=yaml.safe_dump(dict(values or {})),
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT_S,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise HarnessError(f"helm template failed:\n{done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d and d.get("kind") in IDENTITY_KINDS]


def install_operator_identity(
    harness: KubeHarness,
    *,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    values: Mapping[str, Any] | None = None,
) -> OperatorIdentity:
    """Apply the chart's ServiceAccount and RBAC to the harness's cluster (as the
    admin; the namespace made if missing) and write ``DIR/kubeconfig-<ns>-<sa>``."""
    objects = chart_identity_objects(
        harness.dir, namespace=namespace, release=release, values=values
    )
    accounts = [o for o in objects if o["kind"] == "ServiceAccount"]
    if len(accounts) != 1:
        raise HarnessError(f"the chart renders {len(accounts)} ServiceAccounts, not one")
    if harness.get("namespaces", None, namespace) is None:
        harness.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    harness.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    name = str(accounts[0]["metadata"]["name"])
    return OperatorIdentity(
        namespace=namespace,
        service_account=name,
        kubeconfig=harness.service_account_kubeconfig(namespace, name),
        objects=tuple(objects),
    )
