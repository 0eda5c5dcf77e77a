"""Where an operated cluster runs: :class:`EmulatedBackend` (the emulator, the pod
realiser and the real operator as processes on this machine — always available) or
:class:`RealBackend` (a real cluster: ``KUBECONFIG``, the images, the operator
installed). Both answer the same small :class:`Backend` protocol, so the suite and
the demo drive either the same way: with the real ``kubectl``.

A real cluster is used only when everything it needs is there; otherwise
:class:`BackendUnavailable` says what is missing, and the suite skips saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from rocketcluster.e2e.images.buildah import run_argv, working_container
from rocketcluster.e2e.k8s.chart_identity import install_operator_identity
from rocketcluster.e2e.k8s.operators import LEASE_ENV, OperatorReplicas, replica_name
from rocketcluster.e2e.k8s.rollcheck import PodEvent
from rocketcluster.e2e.kube.binaries import BinariesUnavailable, ensure_binaries
from rocketcluster.e2e.kube.harness import HarnessError, KubeHarness
from rocketcluster.e2e.kube.imagerun import container_name
from rocketcluster.e2e.kube.templates import is_ready

ENV_IMAGE = "ROCKETCLUSTER_E2E_IMAGE"  # the image a real cluster runs (issue: make images)
ENV_OPERATOR_NAMESPACE = "ROCKETCLUSTER_E2E_OPERATOR_NAMESPACE"
OPERATOR_LABEL = "app.kubernetes.io/name=rocketcluster-operator"
TICK_S = "1"  # the operator's reconcile period here (production: 2 s)
OPERATOR_KUBECONFIG = "/etc/rocketcluster/kubeconfig"  # in the operator's image


class BackendUnavailable(RuntimeError):
    """This backend cannot run here; the message says what is missing."""


class Backend(Protocol):
    name: str
    namespace: str
    image: str | None  # the image a manifest gets (None: as written)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]: ...

    def get(self, kind: str, name: str) -> dict[str, Any] | None: ...

    def objects(self, kind: str, label_selector: str | None = None) -> list[dict[str, Any]]: ...

    def address(self, host_port: str) -> str:
        """A cluster ``host:port`` (a Service's DNS name) as this machine reaches it."""
        ...

    def kill_pod(self, name: str) -> None:
        """A process or node failure of the pod's containers."""
        ...

    def pod_events(self) -> list[PodEvent]:
        """When pods were deleted and became ready, oldest first."""
        ...

    def close(self) -> None: ...


class EmulatedBackend:
    """The emulator, the realiser and the operator (``rocketcluster-operator``, run as
    processes with the merge-patch writer the emulator needs), all stopped by PID.

    The operator runs as its chart's Deployment does: ``operator_replicas`` (2, as the
    chart) candidates for the Lease, each started again when it exits
    (:class:`OperatorReplicas`); ``DIR/failpoints`` is where a test arms the
    operator's failpoints.

    Pods run as host processes (the image is only a name), or with ``image`` given,
    from that local image and its controller twin under ``buildah run`` (the
    realiser's image mode): the manifest gets ``spec.image = image``. With
    ``operator_image`` the operator runs from its image too, in a working container
    removed at :meth:`close`. ``host_sources`` (host processes only) names images whose
    pods run another tree's packages, e.g. a previous release's."""

    name = "emulated"
    namespace = "default"

    def __init__(
        self,
        directory: Path,
        crds: Path,
        *,
        image: str | None = None,
        operator_image: str | None = None,
        host_sources: Mapping[str, Path] | None = None,
        operator_replicas: int = 2,
        nodes: int = 1,
    ) -> None:
        try:
            ensure_binaries()
        except BinariesUnavailable as exc:
            raise BackendUnavailable(str(exc)) from exc
        self.image: str | None = image
        self.harness = KubeHarness(
            directory,
            pod_runtime="image" if image else "process",
            host_sources=host_sources,
            nodes=nodes,
            # the NetworkPolicies the operator renders, enforced (processes only: in
            # image mode whether buildah keeps a pod's cgroup is unchecked)
            network_policies="off" if image else "enforce",
        )
        self._resources = contextlib.ExitStack()
        try:
            self.harness.start()
            self.harness.kubectl("apply", "-f", str(crds))
            # The operator acts as the chart's ServiceAccount, under the chart's RBAC
            # (enforced by the emulator): a verb the chart lacks is a 403.
            self.identity = install_operator_identity(self.harness)
            self.failpoints = self.harness.dir / "failpoints"
            self.failpoints.mkdir(exist_ok=True)
            env = {
                "ROCKETCLUSTER_APPLY_MODE": "merge",
                "ROCKETCLUSTER_TICK_SECONDS": TICK_S,
                "ROCKETCLUSTER_FAILPOINT_DIR": str(self.failpoints),
                "KUBECONFIG": str(self.identity.kubeconfig),
                "POD_NAMESPACE": self.identity.namespace,  # where its Lease is
            }
            argv = [sys.executable, "-m", "rocketcluster.operator.main"]
            if operator_image:  # one working container: one replica, its env baked in
                argv = self._in_image(
                    operator_image, {**env, **LEASE_ENV, "POD_NAME": replica_name(0)}
                )
                operator_replicas = 1
            self.operators = OperatorReplicas(
                self.harness, argv, env, operator_replicas, namespace=self.identity.namespace
            )
        except BaseException:
            self.close()
            raise

    @property
    def operator(self) -> subprocess.Popen[bytes]:
        """The leading operator replica's process."""
        return self.operators.leading_process()

    def restart_operator(self) -> Path:
        """Stop every operator replica by its PID (SIGTERM: kopf finishes what it
        does, the leader gives the Lease back) and start them again, as a rollout of
        its Deployment would: the new leader resumes every object. Its log is
        returned."""
        self.operators.restart_all()
        return self.harness.dir / f"{self.operators.pod_name(self.operators.leader())}.log"

    def _in_image(self, image: str, env: dict[str, str]) -> list[str]:
        """``buildah run`` of the operator image's entry point as the image's user,
        with a copy of the ServiceAccount's kubeconfig the image's user can read (its
        token and the emulator's CA: a test's own, on loopback)."""
        name = container_name(self.harness.dir / "operator", image)
        self._resources.enter_context(working_container(image, name))
        source = self.harness.dir / "operator-kubeconfig"
        source.write_bytes(self.identity.kubeconfig.read_bytes())
        source.chmod(0o644)
        return run_argv(
            name,
            ["rocketcluster-operator"],
            volumes=[(str(source), OPERATOR_KUBECONFIG, True)],
            env={**env, "KUBECONFIG": OPERATOR_KUBECONFIG},
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        return self.harness.kubectl(*args, input=input, check=check, timeout=timeout)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.harness.get(kind, self.namespace, name)

    def objects(self, kind: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self.harness.list(kind, self.namespace, label_selector)

    def address(self, host_port: str) -> str:
        host, _, port = host_port.rpartition(":")
        return f"{self.harness.resolve(host)}:{port}"

    def kill_pod(self, name: str) -> None:
        if not self.harness.kill_pod(self.namespace, name):
            raise HarnessError(f"pod {name} has no running container to kill")

    def pod_events(self) -> list[PodEvent]:
        kinds = {"pod-deleting": "deleting", "ready": "ready"}
        return [
            PodEvent(float(e["time"]), kinds[e["event"]], str(e["pod"]))
            for e in self.harness.events()
            if e["event"] in kinds and e.get("namespace") == self.namespace
        ]

    def close(self) -> None:
        with self._resources:  # the operator's working container, after its process
            operators: OperatorReplicas | None = getattr(self, "operators", None)
            if operators is not None:
                operators.stop()
            self.harness.stop()

    def __enter__(self) -> EmulatedBackend:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _in_cluster_dns() -> bool:
    try:
        socket.getaddrinfo("kubernetes.default.svc", 443)
    except OSError:
        return False
    return True


class RealBackend:
    """A real cluster. Needs ``KUBECONFIG`` (or a pod's service account), the image
    in ``ROCKETCLUSTER_E2E_IMAGE``, the CRDs and a running operator (the Helm chart
    installs both), and cluster networking (the suite talks to Services and pods, so
    it runs in a pod of that cluster). Each run gets a namespace of its own, deleted
    at the end."""

    name = "real"

    def __init__(self, directory: Path) -> None:
        missing = []
        if not os.environ.get("KUBECONFIG") and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            missing.append("KUBECONFIG is not set (and this is not a pod)")
        self.image: str | None = os.environ.get(ENV_IMAGE, "")
        if not self.image:
            missing.append(f"{ENV_IMAGE} is not set (build and push the images first)")
        if missing:
            raise BackendUnavailable("no real cluster: " + "; ".join(missing))
        try:
            self._kubectl_path = str(ensure_binaries().kubectl)
        except BinariesUnavailable as exc:
            raise BackendUnavailable(str(exc)) from exc
        self.dir = directory
        if not _in_cluster_dns():
            raise BackendUnavailable(
                "cluster DNS does not resolve here: run the suite in a pod of the cluster"
            )
        crd = self.kubectl("get", "crd", "rocketclusters.rocketcluster.io", check=False)
        if crd.returncode != 0:
            raise BackendUnavailable("the RocketCluster CRD is not installed (helm install)")
        operator_ns = os.environ.get(ENV_OPERATOR_NAMESPACE, "")
        scope = ["-n", operator_ns] if operator_ns else ["-A"]
        found = self.kubectl("get", "deploy", *scope, "-l", OPERATOR_LABEL, "-o", "name")
        if not found.stdout.strip():
            raise BackendUnavailable("no rocketcluster-operator Deployment is running")
        self.namespace = f"rc-e2e-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", self.namespace)
        self._events: list[PodEvent] = []
        self._watch = subprocess.Popen(
            [
                self._kubectl_path,
                "get",
                "pods",
                "-n",
                self.namespace,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._watcher = threading.Thread(target=self._follow, daemon=True)
        self._watcher.start()

    def _follow(self) -> None:
        """Pod events from a watch: the first deletionTimestamp, and Ready turning
        true (a real cluster has no realiser log; the API's view is the next best)."""
        stream = self._watch.stdout
        if stream is None:
            return
        decoder = json.JSONDecoder()
        buffer = ""
        deleting: set[str] = set()
        ready: set[str] = set()
        for line in stream:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                continue
            buffer = buffer.lstrip()[end:]
            pod = event.get("object") or {}
            name = (pod.get("metadata") or {}).get("name", "")
            uid = (pod.get("metadata") or {}).get("uid", "")
            now = time.time()
            if pod.get("metadata", {}).get("deletionTimestamp") and uid not in deleting:
                deleting.add(uid)
                self._events.append(PodEvent(now, "deleting", name))
            if is_ready(pod) and uid not in ready:
                ready.add(uid)
                self._events.append(PodEvent(now, "ready", name))

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self._kubectl_path, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise BackendUnavailable(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        done = self.kubectl("get", kind, name, "-n", self.namespace, "-o", "json", check=False)
        if done.returncode != 0:
            return None
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def objects(self, kind: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", self.namespace, "-o", "json"]
        if label_selector:
            args += ["-l", label_selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args).stdout).get("items", [])
        return items

    def address(self, host_port: str) -> str:
        return host_port  # cluster DNS resolves here

    def kill_pod(self, name: str) -> None:
        # No node access from a test: a forced deletion is the nearest failure.
        self.kubectl("delete", "pod", name, "-n", self.namespace, "--grace-period=0", "--force")

    def pod_events(self) -> list[PodEvent]:
        return sorted(self._events, key=lambda e: e.at)

    def close(self) -> None:
        self._watch.terminate()
        self._watch.wait(10)
        self.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)

    def __enter__(self) -> RealBackend:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_backend(kind: str, directory: Path, crds: Path) -> EmulatedBackend | RealBackend:
    """``emulated`` or ``real``; raises :class:`BackendUnavailable` saying why not."""
    if kind == "emulated":
        return EmulatedBackend(directory, crds)
    if kind == "real":
        return RealBackend(directory)
    raise ValueError(f"unknown backend {kind!r}: emulated or real")
