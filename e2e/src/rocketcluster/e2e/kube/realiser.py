"""The pod realiser: this machine as one Kubernetes node behind the emulator (or as
N nodes, ``--nodes N``: Node objects pods are scheduled onto by :mod:`scheduler`,
cordoned by ``spec.unschedulable`` — all of them processes of this host).

``python -m rocketcluster.e2e.kube.realiser --api URL --dir DIR`` watches the API
server and plays, for every namespace:

- the StatefulSet and Deployment controllers (the pure plans of
  :mod:`statefulsets` and :mod:`deployments`, carried out here);
- a volume provisioner: every claim is bound at once to ``DIR/volumes/<ns>/<claim>``
  and protected (``kubernetes.io/pvc-protection``) while a pod uses it; the
  directory goes with the claim object;
- kubelet (:mod:`kubelet`): every pod runs as local processes with an address of
  its own — host processes, or with ``--pod-runtime image`` each container from its
  local image under ``buildah run`` (:mod:`imagerun`); the realiser puts its
  finalizer on each pod, so a deletion waits for the processes to be gone before
  the pod object goes; each pod mounts its ServiceAccount's own token, minted once
  per account through TokenRequest (:meth:`Realiser.token_for`). The realiser itself
  calls the API with ``--token-file`` (the harness's admin token);
- DNS and kube-proxy (:mod:`network`, :mod:`proxy`): ``DIR/hosts.json``, Endpoints
  objects, and a TCP proxy per ClusterIP Service port;
- the scheduler (:mod:`scheduler`) for pods without a node, and the disruption
  controller: every PodDisruptionBudget's status (:mod:`disruption`);
- with ``--network-policies enforce``, the network plugin: NetworkPolicies judged by
  :mod:`netpol` and enforced by :mod:`firewall` (a cgroup per pod, SNAT to its
  address, an iptables chain per address block); ``realiser.json`` says
  ``networkPolicies: enforced`` or ``off: <why>``.

Everything is level-triggered: each change seen through the watches (or a pod's
own status change) runs one reconcile pass over everything, as do ticks every
half second. Events go to ``DIR/events.jsonl``; the control API's port and the
realiser's pid to ``DIR/realiser.json``; every process started to
``DIR/processes.jsonl``. SIGTERM stops every process (SIGTERM, then SIGKILL) and
leaves the API objects as they are, as a node that goes down would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp.web
import httpx

from rocketcluster.api.status import now_rfc3339
from rocketcluster.e2e.kube import disruption, endpoints, firewall, netpol, network, scheduler
from rocketcluster.e2e.kube.atomic import write_atomic
from rocketcluster.e2e.kube.cache import Cache, run_informer
from rocketcluster.e2e.kube.client import JSON_PATCH, KubeClient, KubeError
from rocketcluster.e2e.kube.control import control_app
from rocketcluster.e2e.kube.deployments import plan_deployment
from rocketcluster.e2e.kube.events import EventLog
from rocketcluster.e2e.kube.imagerun import RUNTIMES, ImageRuntime
from rocketcluster.e2e.kube.kubelet import NodeContext, PodWorker
from rocketcluster.e2e.kube.podenv import ConfigError
from rocketcluster.e2e.kube.processes import Ledger
from rocketcluster.e2e.kube.proxy import Endpoint, Picker, PortKey, ServiceProxies
from rocketcluster.e2e.kube.resources import BUILTINS, ResourceType
from rocketcluster.e2e.kube.statefulsets import plan_statefulset
from rocketcluster.e2e.kube.templates import (
    SAFE_ALPHABET,
    adopted,
    is_terminating,
)
from rocketcluster.e2e.kube.volumes import binding, claim_dir, claim_in_use, remove_tree

log = logging.getLogger("rocketcluster.realiser")

FINALIZER = "rocketcluster.io/realiser"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
NODE_NAME = "realiser"
WATCHED = (
    "namespaces",
    "pods",
    "statefulsets",
    "deployments",
    "services",
    "endpoints",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "nodes",
    "poddisruptionbudgets",
    "serviceaccounts",
    "networkpolicies",
)
# What pods' volume files are made of, besides DNS names and the pod itself.
FILE_INPUTS = ("configmaps", "secrets", "persistentvolumeclaims")
REFUSALS_FILE = "network-policy-refusals.json"
# --network-policies' default: "off" unless this says "enforce" (a whole suite can be
# tried with policies enforced without changing what starts the realiser).
NETWORK_POLICIES_ENV = "ROCKETCLUSTER_REALISER_NETWORK_POLICIES"
TICK_S = 0.5


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


class Realiser:
    def __init__(
        self,
        api_url: str,
        directory: Path,
        *,
        probe_period_cap: float | None = None,
        node_name: str = NODE_NAME,
        pod_runtime: str = "process",
        host_sources: Mapping[str, Path] | None = None,
        nodes: int = 1,
        token: str | None = None,
        network_policies: str = "off",
    ) -> None:
        if nodes < 1:
            raise ValueError(f"--nodes {nodes}: at least one node")
        if pod_runtime not in RUNTIMES:
            raise ValueError(f"pod runtime {pod_runtime!r}: choose {' or '.join(RUNTIMES)}")
        if host_sources and pod_runtime != "process":
            raise ValueError("host sources apply to host processes only (--pod-runtime process)")
        self.api_url = api_url.rstrip("/")
        self.dir = directory.resolve()  # pods see these paths from their own directories
        self.types: dict[str, ResourceType] = {
            rt.plural: rt for rt in BUILTINS if rt.plural in WATCHED
        }
        self.client = KubeClient(self.api_url, token=token)
        # ServiceAccount tokens for pods, minted once per (ns, account, account uid)
        self._tokens: dict[tuple[str, str, str], str] = {}
        self.cache = Cache()
        # pod addresses from a block no other realiser on this host uses
        self.pod_network, self._network_lock = network.reserve_block(network.POD_NETWORK)
        self.pod_ips = network.IpAllocator(self.pod_network)
        self.workers: dict[str, PodWorker] = {}
        self.revisions: dict[str, dict[str, Any]] = {}
        self.claims_bound: set[tuple[str, str]] = set()
        self.host_names: dict[str, str] = {}
        # the lookup of these names, made again only when they change
        self._resolve = network.resolver(self.host_names, self._cluster_ip_service, self.pod_ip)
        self._file_inputs: tuple[int, ...] = ()  # Cache.changes of FILE_INPUTS, last seen
        self.proxies = ServiceProxies()
        if network_policies not in firewall.MODES:
            raise ValueError(f"--network-policies {network_policies}: choose enforce or off")
        self.firewall: firewall.Firewall | None = None
        self.network_policies = "off: --network-policies off"  # realiser.json says this
        if network_policies == "enforce":
            why = firewall.unavailable()
            if pod_runtime != "process":
                why = "image mode: whether buildah run keeps the pod's cgroup is unchecked"
            if why is None:
                self.firewall = firewall.Firewall(
                    self.pod_network, network.POD_NETWORK, network.SERVICE_NETWORK
                )
            self.network_policies = "enforced" if why is None else f"off: {why}"
        self._firewall_lock = asyncio.Lock()
        self._policy_notes: set[str] = set()
        self._snat_applied: set[str] = set()  # pods whose SNAT rule is written
        self._enforced: tuple[Any, ...] = ()  # the inputs of the rules last written
        self.rng = random.Random()
        self.wake = asyncio.Event()
        directory.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(directory / "events.jsonl")
        self.ledger = Ledger(directory / "processes.jsonl")
        # Probes go straight to the pod, never through an HTTP(S)_PROXY of the host.
        self.http = httpx.AsyncClient(verify=False, trust_env=False)
        self.images = ImageRuntime(self.dir) if pod_runtime == "image" else None
        self.ctx = NodeContext(
            root=directory,
            api_url=self.api_url,
            node_name=node_name,
            events=self.events,
            ledger=self.ledger,
            http=self.http,
            inputs=self,
            report=self._report,
            probe_period_cap=probe_period_cap,
            images=self.images,
            host_sources=dict(host_sources or {}),
            token_for=self.token_for,
            cgroup_for=self.cgroup_for,
        )
        # The Node objects this realiser plays: one named node_name, or N numbered.
        self.node_names = [node_name] if nodes == 1 else [f"{node_name}-{i}" for i in range(nodes)]
        self._node_contexts = {
            name: dataclasses.replace(self.ctx, node_name=name) for name in self.node_names
        }

    # --- what pods read (kubelet.PodInputs) ----------------------------------------

    def _by_name(self, plural: str, namespace: str) -> dict[str, Mapping[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.cache.list(plural, namespace)}

    def configmaps(self, namespace: str) -> Mapping[str, Mapping[str, Any]]:
        return self._by_name("configmaps", namespace)

    def secrets(self, namespace: str) -> Mapping[str, Mapping[str, Any]]:
        return self._by_name("secrets", namespace)

    def services(self, namespace: str) -> list[Mapping[str, Any]]:
        return list(self.cache.list("services", namespace))

    def claim_exists(self, namespace: str, name: str) -> bool:
        claim = self.cache.get("persistentvolumeclaims", namespace, name)
        return claim is not None and (claim.get("status") or {}).get("phase") == "Bound"

    def pod_ip(self, namespace: str, name: str) -> str:
        return self.pod_ips.allocate(f"{namespace}/{name}")

    def _cluster_ip_service(self, namespace: str, name: str) -> bool:
        svc = self.cache.get("services", namespace, name)
        return svc is not None and not network.is_headless(svc)

    def resolve(self, name: str) -> str | None:
        return self._resolve(name)

    async def token_for(self, namespace: str, service_account: str) -> str:
        """The token a pod of the ServiceAccount mounts, minted through TokenRequest
        once per account (kubelet's token manager, without rotation). A missing
        account is a :class:`ConfigError` (the pod waits, as kubelet's mount does)."""
        account = self.cache.get("serviceaccounts", namespace, service_account)
        if account is None:
            raise ConfigError(
                f'MountVolume.SetUp failed for volume "kube-api-access": failed to fetch '
                f'token: serviceaccounts "{service_account}" not found'
            )
        key = (namespace, service_account, str(account["metadata"].get("uid")))
        if key not in self._tokens:
            try:
                self._tokens[key] = await self.client.token(namespace, service_account)
            except KubeError as exc:
                raise ConfigError(
                    f'MountVolume.SetUp failed for volume "kube-api-access": failed to '
                    f"fetch token: {exc.message}"
                ) from exc
        return self._tokens[key]

    # --- NetworkPolicies (firewall.py) --------------------------------------------

    async def cgroup_for(self, uid: str, ip: str) -> str | None:
        """The cgroup a container of pod ``uid`` joins, its SNAT and its policies in
        place before it runs (None: policies are off)."""
        if self.firewall is None:
            return None
        procs = self.firewall.cgroup(uid, ip)
        if uid not in self._snat_applied:  # a first container: its rule first
            await self._enforce()
        return procs

    async def _enforce(self) -> None:
        """Judge the policies against the pods and write the rules when they changed;
        then let go of the cgroups of pods that are gone."""
        fw = self.firewall
        if fw is None:
            return
        async with self._firewall_lock:
            # what the rules are made of; unchanged since the last write: nothing to do
            inputs = (
                tuple(self.cache.changes(p) for p in ("pods", "networkpolicies", "namespaces")),
                frozenset(fw.cgroups.items()),
                frozenset(self.workers),
            )
            if inputs == self._enforced:
                return
            pods = []
            for cached in self.cache.list("pods"):
                worker = self.workers.get(cached["metadata"]["uid"])
                status = cached.get("status") or {}
                if worker is not None and not status.get("podIP"):  # not reported yet
                    pods.append({**cached, "status": {**status, "podIP": worker.ip}})
                else:
                    pods.append(cached)
            rules = netpol.ruleset(
                self.cache.list("networkpolicies"), pods, self.cache.list("namespaces")
            )
            for note in rules.ignored:
                if note not in self._policy_notes:
                    self._policy_notes.add(note)
                    log.info("%s", note)
            snat = {uid: ip for uid, ip in fw.cgroups.items() if uid in self.workers}
            try:
                await asyncio.to_thread(fw.apply, rules, snat)
            except (firewall.FirewallError, OSError, subprocess.SubprocessError) as exc:
                log.warning("network policies not applied (retried): %s", exc)
                return
            self._snat_applied = set(snat)
            self._enforced = inputs
            for uid in [u for u in fw.cgroups if u not in self.workers]:
                if not fw.release(uid):  # processes still in it: try again next pass
                    self._enforced = ()

    def _start_firewall(self) -> None:
        fw = self.firewall
        if fw is None:
            return
        try:
            fw.start()
        except (firewall.FirewallError, OSError, subprocess.SubprocessError) as exc:
            log.warning("network policies off: %s", exc)
            self.firewall, self.network_policies = None, f"off: {exc}"
            return
        self.proxies.keep_source = network.POD_NETWORK

    def _stop_firewall(self) -> None:
        """Report the refusals (``DIR/network-policy-refusals.json``: per isolated pod,
        the connections its policies refused), then remove the rules and cgroups."""
        if self.firewall is None:
            return
        try:
            refused = self.firewall.refusals()
            _write_json(self.dir / REFUSALS_FILE, refused)
            if refused:
                log.info("connections refused by network policies: %s", refused)
            left = self.firewall.stop()
        except (firewall.FirewallError, OSError, subprocess.SubprocessError) as exc:
            log.warning("network policy rules not removed: %s", exc)
            return
        if left:
            log.warning("cgroups left (processes still in them): %s", left)

    # --- the control API (control.Controls) ----------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        return [
            {
                "namespace": w.namespace,
                "name": w.name,
                "uid": w.uid,
                "ip": w.ip,
                "pids": w.pids(),
                "ready": w.ready,
                "node": w.ctx.node_name,
            }
            for w in self.workers.values()
        ]

    def kill(self, namespace: str, name: str) -> list[int] | None:
        for worker in self.workers.values():
            if (worker.namespace, worker.name) == (namespace, name) and not worker.gone.is_set():
                return worker.kill()
        return None

    # --- API writes, answers into the cache ----------------------------------------

    async def _write(
        self, plural: str, coro: Any, *, deleting: bool = False
    ) -> dict[str, Any] | None:
        """Await one write; its answer goes into the cache at once (a deletion that
        completed removes the object) so the next pass does not repeat it."""
        try:
            obj: dict[str, Any] | None = await coro
        except KubeError as exc:
            if exc.code not in (404, 409):
                log.warning("%s write refused: %s", plural, exc)
            return None
        if obj is None or obj.get("kind") == "Status" or "metadata" not in obj:
            return obj
        if deleting and not obj["metadata"].get("deletionTimestamp"):
            self.cache.remove(plural, obj)
        else:
            self.cache.put(plural, obj)
        return obj

    async def _report(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        cached = self.cache.get("pods", meta["namespace"], meta["name"])
        if cached is None or cached["metadata"]["uid"] != meta["uid"]:
            return
        if cached.get("status") == status:
            return
        rt = self.types["pods"]
        await self._write(
            "pods",
            self.client.patch(
                rt, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            ),
        )

    # --- reconcile -----------------------------------------------------------------

    async def reconcile(self) -> None:
        for step in (
            self._nodes,
            self._kubelet,
            self._claims,
            self._statefulsets,
            self._deployments,
            self._network,
            self._budgets,
        ):
            try:
                await step()
            except Exception:
                log.exception("reconcile step %s failed", step.__name__)

    async def _kubelet(self) -> None:
        rt = self.types["pods"]
        seen = set()
        for pod in self.cache.list("pods"):
            meta = pod["metadata"]
            uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
            seen.add(uid)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.update(pod)
                continue
            finalizers = list(meta.get("finalizers") or [])
            written: dict[str, Any] | None = None
            if is_terminating(pod):
                if FINALIZER in finalizers:  # nothing of it runs here: let it go
                    await self._drop_finalizer("pods", pod, FINALIZER)
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            node = self._node_for(pod)
            if node is None:
                continue
            if FINALIZER not in finalizers or not (pod.get("spec") or {}).get("nodeName"):
                patch = {
                    "metadata": {"finalizers": [*finalizers, FINALIZER]}
                    if FINALIZER not in finalizers
                    else {},
                    "spec": {"nodeName": node},
                }
                written = await self._write("pods", self.client.patch(rt, ns, name, patch))
                if written is None:
                    continue
            worker = PodWorker(written or pod, self.pod_ip(ns, name), self._node_contexts[node])
            self.workers[uid] = worker
            worker.start()
            if worker.task is not None:
                worker.task.add_done_callback(lambda _: self.wake.set())
        for uid, worker in list(self.workers.items()):
            if uid not in seen:
                worker.vanished()
            if worker.gone.is_set():
                del self.workers[uid]
                cached = self.cache.get("pods", worker.namespace, worker.name)
                if cached is not None and cached["metadata"]["uid"] == uid:
                    await self._drop_finalizer("pods", cached, FINALIZER)
                self.events.emit(
                    "pod-deleted",
                    namespace=worker.namespace,
                    pod=worker.name,
                    uid=uid,
                    ip=worker.ip,
                )
                remove_tree(worker.dir)
        inputs = tuple(self.cache.changes(plural) for plural in FILE_INPUTS)
        changed, self._file_inputs = inputs != self._file_inputs, inputs
        for worker in self.workers.values():
            if changed or worker.files_stale:
                worker.refresh_files()

    def _node_for(self, pod: Mapping[str, Any]) -> str | None:
        """The node of ours a pod runs on: the one it is bound to, or the one the
        scheduler picks for it (None: bound to a node not ours, or no node fits)."""
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            return str(bound) if bound in self._node_contexts else None
        nodes = [n for n in self.cache.list("nodes") if n["metadata"]["name"] in self.node_names]
        if "nodes" not in self.cache.synced or not nodes:  # not registered yet
            nodes = [
                {**scheduler.node_object(n), "status": scheduler.node_status(n, "")}
                for n in self.node_names
            ]
        return scheduler.choose_node(pod, nodes, self.cache.list("pods"))

    async def _nodes(self) -> None:
        """Register our nodes (Ready); a cordon (``spec.unschedulable``) is theirs."""
        rt = self.types["nodes"]
        for name in self.node_names:
            node = self.cache.get("nodes", "", name)
            if node is None:
                node = await self._write(
                    "nodes", self.client.create(rt, None, scheduler.node_object(name))
                )
                if node is None:
                    continue
            if not scheduler.node_ready(node):
                await self._write(
                    "nodes",
                    self.client.patch(
                        rt,
                        None,
                        name,
                        {"status": scheduler.node_status(name, now_rfc3339())},
                        subresource="status",
                    ),
                )

    async def _budgets(self) -> None:
        """The disruption controller: each PodDisruptionBudget's status, as an
        eviction judges it (:mod:`disruption`)."""
        rt = self.types["poddisruptionbudgets"]

        def scale_of(kind: str, namespace: str, name: str) -> int | None:
            plural = {"StatefulSet": "statefulsets", "Deployment": "deployments"}.get(kind)
            owner = self.cache.get(plural, namespace, name) if plural else None
            return None if owner is None else int((owner.get("spec") or {}).get("replicas", 1))

        for pdb in self.cache.list("poddisruptionbudgets"):
            meta = pdb["metadata"]
            numbers = disruption.budget_status(
                pdb, self.cache.list("pods", meta["namespace"]), scale_of
            )
            old = pdb.get("status") or {}
            status = numbers.as_status(int(meta.get("generation", 1)))
            status["conditions"] = disruption.conditions(
                numbers, old.get("conditions"), now_rfc3339()
            )
            await self._status(rt, pdb, status)

    async def _drop_finalizer(self, plural: str, obj: Mapping[str, Any], name: str) -> None:
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if name not in finalizers:
            return
        index = finalizers.index(name)
        ops = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": name},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        await self._write(
            plural,
            self.client.patch(
                self.types[plural],
                meta.get("namespace"),
                meta["name"],
                ops,
                content_type=JSON_PATCH,
            ),
        )

    async def _claims(self) -> None:
        rt = self.types["persistentvolumeclaims"]
        live = set()
        pods = self.cache.list("pods")
        for claim in self.cache.list("persistentvolumeclaims"):
            meta = claim["metadata"]
            ns, name = meta["namespace"], meta["name"]
            live.add((ns, name))
            if is_terminating(claim):
                if not claim_in_use(ns, name, pods):
                    await self._drop_finalizer("persistentvolumeclaims", claim, PVC_PROTECTION)
                continue
            if (claim.get("status") or {}).get("phase") == "Bound":
                self.claims_bound.add((ns, name))
                continue
            # A new claim is a new, empty volume, even when a claim of the same name
            # went away between two passes (its directory was not removed yet).
            remove_tree(claim_dir(self.dir, ns, name))
            claim_dir(self.dir, ns, name).mkdir(parents=True, exist_ok=True)
            patch, status = binding(claim, PVC_PROTECTION)
            if await self._write(rt.plural, self.client.patch(rt, ns, name, patch)) is None:
                continue
            await self._write(
                rt.plural, self.client.patch(rt, ns, name, status, subresource="status")
            )
            self.claims_bound.add((ns, name))
            self.events.emit(
                "pvc-created", namespace=ns, claim=name, path=str(claim_dir(self.dir, ns, name))
            )
        if "persistentvolumeclaims" in self.cache.synced:
            for ns, name in sorted(self.claims_bound - live):
                self.claims_bound.discard((ns, name))
                remove_tree(claim_dir(self.dir, ns, name))
                self.events.emit("pvc-deleted", namespace=ns, claim=name)

    async def _statefulsets(self) -> None:
        pods_rt, claims_rt = self.types["pods"], self.types["persistentvolumeclaims"]
        rt = self.types["statefulsets"]
        for sts in self.cache.list("statefulsets"):
            if is_terminating(sts):
                continue
            meta = sts["metadata"]
            ns = meta["namespace"]
            plan = plan_statefulset(
                sts,
                self.cache.list("pods", ns),
                self.cache.list("persistentvolumeclaims", ns),
                revisions=self.revisions,
                finalizers=(FINALIZER,),
            )
            self.revisions[plan.update_revision] = (sts.get("spec") or {}).get("template") or {}
            if not await self._adopt("statefulsets", sts, plan.adopt_pods):
                continue
            for claim in plan.create_claims:
                await self._write(
                    "persistentvolumeclaims", self.client.create(claims_rt, ns, claim)
                )
            for pod in plan.create_pods:
                await self._write("pods", self.client.create(pods_rt, ns, pod))
            for name in plan.delete_pods:
                await self._write("pods", self.client.delete(pods_rt, ns, name), deleting=True)
            for name in plan.delete_claims:
                await self._write(
                    "persistentvolumeclaims", self.client.delete(claims_rt, ns, name), deleting=True
                )
            for name, owners in plan.claim_owners.items():
                await self._write(
                    "persistentvolumeclaims",
                    self.client.patch(
                        claims_rt, ns, name, {"metadata": {"ownerReferences": owners or None}}
                    ),
                )
            await self._status(rt, sts, plan.status)

    async def _adopt(self, plural: str, owner: Mapping[str, Any], names: list[str]) -> bool:
        """Give orphaned pods their new controller's owner reference — once a fresh
        read shows the owner still there and not being deleted (the cache may still
        hold a workload deleted with Orphan, whose pods were just let go), as the
        controllers' ClaimPods rechecks. False when it may not adopt: the plan,
        made with those pods as its own, is not to be carried out."""
        if not names:
            return True
        meta = owner["metadata"]
        ns = meta["namespace"]
        try:
            fresh = await self.client.get(self.types[plural], ns, meta["name"])
        except KubeError:
            return False
        if fresh is None or fresh["metadata"]["uid"] != meta["uid"] or is_terminating(fresh):
            return False
        for name in names:
            pod = self.cache.get("pods", ns, name)
            if pod is None:
                continue
            refs = adopted(pod, owner)["metadata"]["ownerReferences"]
            patch = {"metadata": {"ownerReferences": refs}}
            await self._write("pods", self.client.patch(self.types["pods"], ns, name, patch))
        return True

    async def _status(
        self, rt: ResourceType, obj: Mapping[str, Any], status: dict[str, Any]
    ) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        meta = obj["metadata"]
        await self._write(
            rt.plural,
            self.client.patch(
                rt, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            ),
        )

    async def _deployments(self) -> None:
        pods_rt, rt = self.types["pods"], self.types["deployments"]

        def suffix() -> str:
            return "".join(self.rng.choice(SAFE_ALPHABET) for _ in range(5))

        for deploy in self.cache.list("deployments"):
            if is_terminating(deploy):
                continue
            ns = deploy["metadata"]["namespace"]
            plan = plan_deployment(
                deploy,
                self.cache.list("pods", ns),
                suffix=suffix,
                now=now_rfc3339(),
                finalizers=(FINALIZER,),
            )
            if not await self._adopt("deployments", deploy, plan.adopt_pods):
                continue
            for name in plan.delete_pods:
                await self._write("pods", self.client.delete(pods_rt, ns, name), deleting=True)
            for pod in plan.create_pods:
                await self._write("pods", self.client.create(pods_rt, ns, pod))
            await self._status(rt, deploy, plan.status)

    async def _network(self) -> None:
        services = self.cache.list("services")
        pods = self.cache.list("pods")
        names = network.dns_names(
            services,
            pods,
            self.cache.list("statefulsets"),
            self.pod_ip,
            serves=endpoints.serves,
            selects=endpoints.selects,
        )
        if names != self.host_names:
            self.host_names = names
            self._resolve = network.resolver(names, self._cluster_ip_service, self.pod_ip)
            _write_json(self.dir / "hosts.json", names)
            for worker in self.workers.values():  # a name they mention may resolve now
                worker.refresh_files()
        wanted: dict[PortKey, Picker] = {
            (f"{ns}/{name}", ip, int(port["port"])): self._picker(ns, name, port)
            for ns, name, ip, port in endpoints.proxied_ports(services)
        }
        await self.proxies.sync(wanted)
        for svc in services:
            await self._write_endpoints(svc, pods)
        await self._enforce()

    def _picker(self, namespace: str, name: str, port: Mapping[str, Any]) -> Picker:
        def pick() -> list[Endpoint]:
            svc = self.cache.get("services", namespace, name)
            if svc is None:
                return []
            return endpoints.proxy_targets(
                svc, port, self.cache.list("pods", namespace), self.pod_ip
            )

        return pick

    async def _write_endpoints(self, svc: Mapping[str, Any], pods: list[dict[str, Any]]) -> None:
        spec, meta = svc.get("spec") or {}, svc["metadata"]
        if not spec.get("selector"):
            return
        ns = meta["namespace"]
        subsets = endpoints.subsets(svc, pods, self.pod_ip, self.ctx.node_name)
        current = self.cache.get("endpoints", ns, meta["name"])
        rt = self.types["endpoints"]
        if current is None:
            body = endpoints.endpoints_object(svc, subsets)
            await self._write("endpoints", self.client.create(rt, ns, body))
        elif (current.get("subsets") or []) != subsets:
            await self._write(
                "endpoints", self.client.patch(rt, ns, meta["name"], {"subsets": subsets})
            )

    # --- life cycle ----------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        runner = aiohttp.web.AppRunner(control_app(self))
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        informers = [
            asyncio.ensure_future(run_informer(self.client, self.cache, rt))
            for rt in self.types.values()
        ]
        await asyncio.to_thread(self._start_firewall)
        try:
            while set(self.types) - self.cache.synced and not stop.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await self.reconcile()
            _write_json(
                self.dir / "realiser.json",
                {
                    "pid": os.getpid(),
                    "port": port,
                    "api": self.api_url,
                    "control": f"http://127.0.0.1:{port}",
                    "networkPolicies": self.network_policies,
                    "podNetwork": str(self.pod_network),
                },
            )
            while not stop.is_set():
                waiters = [
                    asyncio.ensure_future(e.wait()) for e in (self.cache.changed, self.wake, stop)
                ]
                await asyncio.wait(waiters, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waiters:
                    waiter.cancel()
                self.cache.changed.clear()
                self.wake.clear()
                if not stop.is_set():
                    await self.reconcile()
        finally:
            for task in informers:
                task.cancel()
            await asyncio.gather(
                *(w.shutdown() for w in self.workers.values()), return_exceptions=True
            )
            await self.proxies.close()
            await asyncio.to_thread(self._stop_firewall)
            await runner.cleanup()
            await self.aclose()

    async def aclose(self) -> None:
        """Let go of the clients, the event log, the address block and the working
        containers (their processes have stopped by now)."""
        if self.images is not None:
            await asyncio.to_thread(self.images.close)
        await self.client.close()
        await self.http.aclose()
        self.events.close()
        if self._network_lock >= 0:
            os.close(self._network_lock)
            self._network_lock = -1


async def _main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    realiser = Realiser(
        args.api,
        args.dir,
        probe_period_cap=args.probe_period_cap,
        node_name=args.node_name,
        pod_runtime=args.pod_runtime,
        host_sources=dict(args.host_source),
        nodes=args.nodes,
        token=args.token_file.read_text().strip() if args.token_file else None,
        network_policies=args.network_policies,
    )
    await realiser.run(stop)


def host_source(value: str) -> tuple[str, Path]:
    """``IMAGE=DIR`` of ``--host-source``."""
    image, sep, directory = value.partition("=")
    if not sep or not image or not directory:
        raise argparse.ArgumentTypeError(f"{value!r}: give IMAGE=DIR")
    if not Path(directory).is_dir():
        raise argparse.ArgumentTypeError(f"{value!r}: {directory} is not a directory")
    return image, Path(directory).resolve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Realise the emulator's pods as processes.")
    parser.add_argument("--api", required=True, help="the API server's URL")
    parser.add_argument("--dir", required=True, type=Path, help="state, logs, volumes")
    parser.add_argument(
        "--probe-period-cap",
        type=float,
        default=None,
        help="run probes at least this often (seconds)",
    )
    parser.add_argument("--node-name", default=NODE_NAME)
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="how many nodes to play: 1 is --node-name itself, more are "
        "<node-name>-0 … <node-name>-(N-1), each a Node object pods are scheduled onto",
    )
    parser.add_argument(
        "--pod-runtime",
        choices=RUNTIMES,
        default="process",
        help="containers as host processes, or from their local images with buildah run",
    )
    parser.add_argument(
        "--host-source",
        type=host_source,
        action="append",
        default=[],
        metavar="IMAGE=DIR",
        help="host processes of a container with this image run the Python packages of "
        "DIR's workspace members (DIR/<member>/src) before the host's: a previous "
        "release's tree stands in for its image (repeatable)",
    )
    parser.add_argument(
        "--network-policies",
        choices=firewall.MODES,
        default=os.environ.get(NETWORK_POLICIES_ENV) or "off",
        help="enforce NetworkPolicies (root, iptables and cgroup v2 needed; process "
        f"mode only), or not (default: ${NETWORK_POLICIES_ENV}, else off)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="a file holding the realiser's bearer token for the API server",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
