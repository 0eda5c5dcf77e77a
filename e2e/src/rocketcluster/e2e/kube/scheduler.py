"""Which node a pod without ``spec.nodeName`` goes to: the default scheduler's rules
that matter here, as a pure function.

Filters: a node marked ``spec.unschedulable`` (cordoned) or not Ready takes no new
pod; ``spec.nodeSelector`` must match the node's labels; a ``DoNotSchedule``
topology spread constraint must hold (a node without the constraint's topology label
is not eligible for it, and on ``kubernetes.io/hostname`` the skew after placing
must stay within ``maxSkew``). Score: fewest pods the pod's spread constraints
select on the node (``ScheduleAnyway`` ones included: the soft hostname spread the
operator renders), then fewest pods in all, then the node's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rocketcluster.e2e.kube import labels

HOSTNAME = "kubernetes.io/hostname"


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def schedulable(node: Mapping[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable") and node_ready(node)


def _node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    meta = node.get("metadata") or {}
    out = dict(meta.get("labels") or {})
    out.setdefault(HOSTNAME, str(meta.get("name", "")))
    return out


def _placed(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Pods by the node they are bound to (those being deleted still occupy it)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            out.setdefault(str(node), []).append(pod)
    return out


def _selected(
    constraint: Mapping[str, Any], pod: Mapping[str, Any], others: list[Mapping[str, Any]]
) -> int:
    namespace = (pod.get("metadata") or {}).get("namespace")
    try:
        selector = labels.from_label_selector(constraint.get("labelSelector"))
    except labels.SelectorError:
        return 0
    if not selector:
        return 0
    return sum(
        1
        for o in others
        if (o.get("metadata") or {}).get("namespace") == namespace
        and labels.matches(selector, (o.get("metadata") or {}).get("labels"))
    )


def choose_node(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> str | None:
    """The node for ``pod`` (None: no node fits; it stays Pending). ``pods``: every
    pod of the cluster, bound or not."""
    spec = pod.get("spec") or {}
    wanted = spec.get("nodeSelector") or {}
    constraints = list(spec.get("topologySpreadConstraints") or [])
    placed = _placed([p for p in pods if p is not pod])
    eligible = []
    for node in nodes:
        node_labels = _node_labels(node)
        if not schedulable(node):
            continue
        if any(node_labels.get(k) != str(v) for k, v in wanted.items()):
            continue
        eligible.append(node)
    counts: list[dict[str, int]] = []
    for c in constraints:
        counts.append(
            {
                str(n["metadata"]["name"]): _selected(
                    c, pod, placed.get(str(n["metadata"]["name"]), [])
                )
                for n in eligible
            }
        )
    fits = []
    for node in eligible:
        name = str(node["metadata"]["name"])
        node_labels = _node_labels(node)
        ok = True
        for c, per_node in zip(constraints, counts, strict=True):
            if c.get("whenUnsatisfiable") != "DoNotSchedule":
                continue
            key = str(c.get("topologyKey", ""))
            if key not in node_labels:
                ok = False
            elif key == HOSTNAME and per_node:
                skew = per_node[name] + 1 - min(per_node.values())
                ok = ok and skew <= int(c.get("maxSkew", 1))
        if ok:
            fits.append(node)
    if not fits:
        return None

    def score(node: Mapping[str, Any]) -> tuple[int, int, str]:
        name = str(node["metadata"]["name"])
        spread = sum(
            per_node[name]
            for c, per_node in zip(constraints, counts, strict=True)
            if c.get("topologyKey") == HOSTNAME
        )
        return spread, len(placed.get(name, [])), name

    return str(min(fits, key=score)["metadata"]["name"])


def node_object(name: str) -> dict[str, Any]:
    """A Node as the realiser registers it (its status is written separately)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                HOSTNAME: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {},
    }


def node_status(name: str, now: str) -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status (the pod realiser)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "addresses": [{"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": "v1.34.0-rocketcluster-realiser",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
