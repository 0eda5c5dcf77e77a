"""A RocketCluster seen the way its user sees it: a manifest applied with kubectl,
its status (conditions, masters, endpoints) read back, its spec patched — plus what
a test needs to look behind the status: the pods, the brokers' own admin API, the
controllers' members."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT
from rocketcluster.ctl.testing import wait_for
from rocketcluster.e2e.k8s.backends import Backend

T = TypeVar("T")


class Waited(AssertionError):
    """A wait ran out; the message says for what and what was seen last."""


def wait_until(
    predicate: Callable[[], T | None], timeout: float, what: str, describe: Callable[[], str]
) -> T:
    """``ctl.testing.wait_for`` that rides out an API or admin call failing now and
    then, and on time-out says what ``describe()`` shows (usually the conditions)."""

    def probe() -> T | None:
        try:
            return predicate()
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    try:
        return wait_for(probe, timeout=timeout, interval=0.25, what=what)
    except TimeoutError as exc:
        raise Waited(f"no {what} within {timeout:.0f}s; now: {describe()}") from exc


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


class OperatedCluster:
    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.http = httpx.Client(timeout=3.0)

    def close(self) -> None:
        self.http.close()

    # --- what a user does ------------------------------------------------------------

    def apply(self, manifest: Path) -> str:
        """``kubectl apply -f`` the manifest (with the backend's image, if it has one)."""
        doc = yaml.safe_load(manifest.read_text())
        if self.backend.image:
            doc.setdefault("spec", {})["image"] = self.backend.image
        out = self.backend.kubectl(
            "apply", "-n", self.backend.namespace, "-f", "-", input=yaml.safe_dump(doc)
        )
        return out.stdout.strip()

    def patch(self, spec: dict[str, Any]) -> str:
        """``kubectl patch rocketcluster NAME --type merge`` on the spec."""
        out = self.backend.kubectl(
            "patch",
            "rocketcluster",
            self.name,
            "-n",
            self.backend.namespace,
            "--type",
            "merge",
            "-p",
            json.dumps({"spec": spec}),
        )
        return out.stdout.strip()

    def resource(self) -> dict[str, Any] | None:
        return self.backend.get("rocketcluster", self.name)

    def status(self) -> dict[str, Any]:
        return dict((self.resource() or {}).get("status") or {})

    def conditions_line(self) -> str:
        status = self.status()
        parts = [
            f"{c['type']}={c['status']} ({c.get('reason', '')}: {c.get('message', '')[:160]})"
            for c in status.get("conditions") or []
        ]
        return f"masters {status.get('masters', '?')}; " + "; ".join(parts)

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> None:
        """Until the status (of the current generation) satisfies ``predicate``."""

        def check() -> bool:
            res = self.resource() or {}
            status = res.get("status") or {}
            current = status.get("observedGeneration") == res.get("metadata", {}).get("generation")
            return current and predicate(status)

        wait_until(check, timeout, what, self.conditions_line)

    def wait_condition(self, kind: str, value: str, timeout: float, reason: str = "") -> None:
        def ok(status: dict[str, Any]) -> bool:
            c = condition(status, kind)
            return c is not None and c["status"] == value and (not reason or c["reason"] == reason)

        self.wait(ok, timeout, f"{kind}={value}" + (f" ({reason})" if reason else ""))

    def settled(self, status: dict[str, Any]) -> bool:
        """Ready, and nothing in progress."""
        ready, moving = condition(status, "Ready"), condition(status, "Progressing")
        return bool(ready and ready["status"] == "True" and moving and moving["status"] == "False")

    def healthy(self, status: dict[str, Any]) -> bool:
        """Settled, and every replica ready and in sync (not Degraded)."""
        degraded = condition(status, "Degraded")
        return self.settled(status) and bool(degraded and degraded["status"] == "False")

    # --- looking behind the status -----------------------------------------------------

    def endpoints(self) -> str:
        """The status' client endpoints as this machine reaches them (a ClientConfiguration
        takes them as they are)."""
        names = str(self.status().get("clientEndpoints", ""))
        return ";".join(self.backend.address(e) for e in names.split(";") if e)

    def group_endpoint(self, group: str) -> str:
        ns = self.backend.namespace
        return self.backend.address(f"{kube.service_host(group, ns)}:{CLIENT_PORT}")

    def pods(self, selector: dict[str, str]) -> list[dict[str, Any]]:
        labels = {kube.LABEL_CLUSTER: self.name, **selector}
        query = ",".join(f"{k}={v}" for k, v in labels.items())
        return sorted(self.backend.objects("pods", query), key=lambda p: str(p["metadata"]["name"]))

    def group_pods(self, group: str) -> list[dict[str, Any]]:
        return self.pods({kube.LABEL_GROUP: group})

    def controller_pods(self) -> list[dict[str, Any]]:
        return self.pods({kube.LABEL_COMPONENT: kube.COMPONENT_CONTROLLER})

    def member_ips(self, members: int) -> list[str]:
        """The controller members' pod IPs in member order (live pods only)."""
        by_member: dict[str, str] = {}
        for pod in self.controller_pods():
            member = (pod["metadata"].get("labels") or {}).get(kube.LABEL_MEMBER, "")
            ip = (pod.get("status") or {}).get("podIP")
            if ip and not pod["metadata"].get("deletionTimestamp"):
                by_member[member] = ip
        names = [kube.controller_member_name(self.name, i) for i in range(members)]
        return [by_member[m] for m in names if m in by_member]

    def broker(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The broker's own ``/v1/broker`` (its id and role)."""
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            return None
        try:
            answer: dict[str, Any] = self.http.get(f"http://{ip}:{ADMIN_PORT}/v1/broker").json()
        except (httpx.HTTPError, ValueError):
            return None
        return answer

    def broker_ids(self, groups: list[str]) -> dict[str, dict[str, int]]:
        """group -> pod -> broker id, as each broker says (ids live on the volumes, so
        they survive restarts)."""
        out: dict[str, dict[str, int]] = {}
        for group in groups:
            ids = {}
            for pod in self.group_pods(group):
                info = self.broker(pod) or {}
                broker_id = (info.get("replication") or {}).get("brokerId") or info.get("brokerId")
                if broker_id:
                    ids[pod["metadata"]["name"]] = int(broker_id)
            out[group] = ids
        return out

    def group_status(self, group: str) -> dict[str, Any] | None:
        return next((g for g in self.status().get("groups") or [] if g["name"] == group), None)
