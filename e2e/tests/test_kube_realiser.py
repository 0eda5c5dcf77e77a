"""The pod realiser as the operator's end-to-end suite uses it: one emulator + realiser
(a module-scoped :class:`KubeHarness`) running tiny real workloads, checked through
the API objects and the realiser's event log — StatefulSet pods in order and Ready
by their probes, a claim that outlives its pod, OnDelete, Services and their
endpoints (a label moved between pods included), ConfigMap files with cluster names
rewritten, a pod waiting for its ConfigMap and Secret, container restarts, graceful
deletion (an endless init container included), Recreate, adoption after an orphaning
delete, cascading deletion and a clean stop. One test drives a single pod's worker
directly, to land a deletion while its container is being started."""

from __future__ import annotations

import asyncio
import functools
import json
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.e2e.kube import kubelet
from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.events import EventLog
from rocketcluster.e2e.kube.harness import KubeHarness
from rocketcluster.e2e.kube.processes import Ledger, start_time
from rocketcluster.e2e.kube.volumes import claim_dir

NS = "default"
WAIT_S = 90.0  # generous: two shared cores

# The web pods' program: it records its boot and what it sees in its claim, then
# serves the claim over HTTP. Its readiness probe asks for /ready, a file in the
# claim that a test may remove. /data, /etc/web and 0.0.0.0 are rewritten by the
# realiser, as a mount and network namespace would make them right.
WEB = textwrap.dedent("""\
    import functools, http.server, json, os, pathlib, shutil
    data = pathlib.Path("/data")
    with (data / "boots.log").open("a") as f:
        f.write(os.environ["POD_NAME"] + "\\n")
    shutil.copy("/etc/web/peers.conf", data / "seen-config")
    env = {k: os.environ.get(k) for k in ("POD_NAME", "POD_IP", "PEER")}
    (data / "env.json").write_text(json.dumps(env))
    (data / "ready").touch()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(data))
    http.server.ThreadingHTTPServer(("0.0.0.0", 8080), handler).serve_forever()
    """)

SLEEP = ["python3", "-c", "import time; time.sleep(600)"]


def _objects() -> list[dict[str, Any]]:
    peers = "peer = web-1.web.default.svc.cluster.local:8080\nlb = web-lb.default.svc:8000\n"
    web_sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "serviceName": "web",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "containers": [
                        {
                            "name": "web",
                            "image": "web:1",
                            "command": ["python3", "-c", WEB],
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                                {"name": "PEER", "value": "web-1.web.default.svc.cluster.local"},
                            ],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            # the operator's three probes, on a named port
                            "startupProbe": {
                                "httpGet": {"path": "/boots.log", "port": "http"},
                                "periodSeconds": 1,
                                "failureThreshold": 30,
                            },
                            "livenessProbe": {
                                "httpGet": {"path": "/boots.log", "port": "http"},
                                "periodSeconds": 10,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": "http"},
                                "periodSeconds": 1,
                                "failureThreshold": 1,
                            },
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data"},
                                {"name": "config", "mountPath": "/etc/web"},
                            ],
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }
    keep_sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "keep"},
        "spec": {
            "replicas": 1,
            "serviceName": "keep",
            "selector": {"matchLabels": {"app": "keep"}},
            "template": {
                "metadata": {"labels": {"app": "keep"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "main", "image": "sleep:1", "command": SLEEP}],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        },
    }

    def service(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}

    objects = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "web-config"},
            "data": {"peers.conf": peers},
        },
        service(
            "web",
            clusterIP="None",
            selector={"app": "web"},
            ports=[{"name": "http", "port": 8080}],
        ),
        service("web-lb", selector={"app": "web"}, ports=[{"port": 8000, "targetPort": "http"}]),
        service(
            "web-master",
            selector={"app": "web", "role": "master"},
            ports=[{"port": 8000, "targetPort": "http"}],
        ),
        service(
            "web-all",
            selector={"app": "web"},
            publishNotReadyAddresses=True,
            ports=[{"port": 8000, "targetPort": "http"}],
        ),
        web_sts,
        keep_sts,
    ]
    return objects


def _manifest() -> str:
    return "\n---\n".join(json.dumps(o) for o in _objects())


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[KubeHarness]:
    with KubeHarness(tmp_path_factory.mktemp("realiser"), probe_period_cap=1.0) as harness:
        harness.kubectl("apply", "-f", "-", input=_manifest())
        yield harness


# --- helpers --------------------------------------------------------------------------


def _pod(kube: KubeHarness, name: str) -> dict[str, Any] | None:
    return kube.get("pods", NS, name)


def _is_ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _ready_pod(kube: KubeHarness, name: str, *, not_uid: str = "") -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = _pod(kube, name)
        if pod is None or not _is_ready(pod) or pod["metadata"]["uid"] == not_uid:
            return None
        return None if pod["metadata"].get("deletionTimestamp") else pod

    return kube.wait_for(ready, WAIT_S, f"{name} to be Ready")


def _events(kube: KubeHarness, kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.events()
        if (kind is None or e["event"] == kind) and all(e.get(k) == v for k, v in match.items())
    ]


def _one(kube: KubeHarness, kind: str, **match: Any) -> dict[str, Any]:
    found = _events(kube, kind, **match)
    assert len(found) == 1, (kind, match, found)
    return found[0]


def _get(url: str) -> str:
    with httpx.Client(trust_env=False, timeout=10.0) as client:
        response = client.get(url)
        response.raise_for_status()
        return response.text


def _web(pod: dict[str, Any], path: str) -> str:
    return _get(f"http://{pod['status']['podIP']}:8080/{path}")


def _gone(kube: KubeHarness, kind: str, name: str) -> bool:
    return kube.get(kind, NS, name) is None


# --- one pod's worker on its own --------------------------------------------------------


class _NoInputs:
    def configmaps(self, namespace: str) -> Mapping[str, Mapping[str, Any]]:
        return {}

    def secrets(self, namespace: str) -> Mapping[str, Mapping[str, Any]]:
        return {}

    def services(self, namespace: str) -> list[Mapping[str, Any]]:
        return []

    def claim_exists(self, namespace: str, name: str) -> bool:
        return True

    def resolve(self, name: str) -> str | None:
        return None


async def test_a_container_starting_as_its_pod_is_deleted_does_not_outlive_the_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deletion lands while the container's process is being started: the pod
    may only be reported gone once that process is gone too."""
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": NS, "uid": "uid-race"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "command": SLEEP}],
        },
    }

    async def report(pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        return None

    events = EventLog(tmp_path / "events.jsonl")
    async with httpx.AsyncClient(trust_env=False) as http:
        ctx = kubelet.NodeContext(
            root=tmp_path,
            api_url="http://127.0.0.1:9",
            node_name="node",
            events=events,
            ledger=Ledger(tmp_path / "processes.jsonl"),
            http=http,
            inputs=_NoInputs(),
            report=report,
        )
        worker = kubelet.PodWorker(pod, "127.30.252.1", ctx)
        spawn = asyncio.create_subprocess_exec

        async def deleted_meanwhile(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
            deleted = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "now"}}
            worker.update(deleted)
            await asyncio.sleep(0.2)  # the worker stops what runs (nothing yet)
            return await spawn(*args, **kwargs)

        monkeypatch.setattr(asyncio, "create_subprocess_exec", deleted_meanwhile)
        worker.start()
        try:
            await asyncio.wait_for(worker.gone.wait(), 30)
            await asyncio.sleep(0.3)  # room for a late start to show
            assert worker.procs, "the container was started"
            assert all(p.returncode is not None for p in worker.procs.values())
        finally:
            await worker.shutdown()
            events.close()


# --- the tests, in the order a cluster lives ------------------------------------------


def test_statefulset_comes_up_in_order_ready_by_its_probe(kube: KubeHarness) -> None:
    def all_ready() -> dict[str, Any] | None:
        sts = kube.get("statefulsets", NS, "web")
        return sts if (sts or {}).get("status", {}).get("readyReplicas") == 2 else None

    status = kube.wait_for(all_ready, WAIT_S, "web to have 2 Ready replicas")["status"]
    assert status["replicas"] == 2 and status["currentRevision"] == status["updateRevision"]
    pods = [_ready_pod(kube, f"web-{i}") for i in range(2)]
    for i, pod in enumerate(pods):
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == f"web-{i}"
        assert labels["controller-revision-hash"] == status["updateRevision"]
        assert pod["spec"]["hostname"] == f"web-{i}" and pod["spec"]["subdomain"] == "web"
        assert pod["status"]["phase"] == "Running"
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"] == "web:1" and container["ready"] and container["started"]
        claim = kube.get("persistentvolumeclaims", NS, f"data-web-{i}")
        assert claim is not None and claim["status"]["phase"] == "Bound"
        assert claim["metadata"]["labels"] == {"app": "web"}
        (owner,) = claim["metadata"]["ownerReferences"]  # whenDeleted: Delete
        assert owner["kind"] == "StatefulSet" and owner["name"] == "web"
    assert pods[0]["status"]["podIP"] != pods[1]["status"]["podIP"]
    # OrderedReady: web-1 was made only once web-0 was Ready
    web0_ready = _one(kube, "ready", pod="web-0")
    web1_created = _one(kube, "pod-created", pod="web-1")
    assert web1_created["time"] > web0_ready["time"]
    endpoints = kube.get("endpoints", NS, "web")
    assert endpoints is not None
    (subset,) = endpoints["subsets"]
    assert sorted(a["hostname"] for a in subset["addresses"]) == ["web-0", "web-1"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    # Retain (the default): the claim has no owner
    keep = kube.get("persistentvolumeclaims", NS, "data-keep-0")
    assert keep is not None and not keep["metadata"].get("ownerReferences")


def test_the_pod_sees_its_configmap_and_env_with_cluster_names_as_addresses(
    kube: KubeHarness,
) -> None:
    web0, web1 = _ready_pod(kube, "web-0"), _ready_pod(kube, "web-1")
    lb = kube.get("services", NS, "web-lb")
    assert lb is not None
    seen = _web(web0, "seen-config")
    web1_ip, lb_ip = web1["status"]["podIP"], lb["spec"]["clusterIP"]
    assert seen == f"peer = {web1_ip}:8080\nlb = {lb_ip}:8000\n"
    env = json.loads(_web(web0, "env.json"))
    assert env == {"POD_NAME": "web-0", "POD_IP": web0["status"]["podIP"], "PEER": web1_ip}
    assert kube.resolve("web-1.web.default.svc.cluster.local") == web1_ip
    assert kube.resolve("web-lb.default.svc") == lb_ip


def test_ondelete_keeps_pods_until_deleted_and_the_claim_outlives_the_pod(
    kube: KubeHarness,
) -> None:
    old0, old1 = _ready_pod(kube, "web-0"), _ready_pod(kube, "web-1")
    sts = kube.get("statefulsets", NS, "web")
    assert sts is not None
    old_rev = sts["status"]["updateRevision"]
    annotations = {"example.com/restarted": "1"}
    patch = {"spec": {"template": {"metadata": {"annotations": annotations}}}}
    kube.patch("statefulsets", NS, "web", patch)

    def new_revision() -> dict[str, Any] | None:
        status = (kube.get("statefulsets", NS, "web") or {}).get("status") or {}
        return status if status.get("updateRevision") not in (None, old_rev) else None

    status = kube.wait_for(new_revision, WAIT_S, "the new update revision")
    new_rev = status["updateRevision"]
    # The pass that saw the new template replaced nothing (OnDelete).
    assert status["currentRevision"] == old_rev and status["updatedReplicas"] == 0
    assert not _events(kube, "pod-deleting", pod="web-0")
    for old in (old0, old1):
        pod = _pod(kube, old["metadata"]["name"])
        assert pod is not None and pod["metadata"]["uid"] == old["metadata"]["uid"]
        assert not pod["metadata"].get("deletionTimestamp")

    kube.delete("pods", NS, "web-0")
    new0 = _ready_pod(kube, "web-0", not_uid=old0["metadata"]["uid"])
    assert new0["metadata"]["labels"]["controller-revision-hash"] == new_rev
    assert new0["metadata"]["annotations"] == annotations
    assert new0["status"]["podIP"] == old0["status"]["podIP"]  # a stable name, a stable address
    # the new pod found what the old one wrote into the claim
    assert _web(new0, "boots.log") == "web-0\nweb-0\n"
    # SIGTERM, the pod gone, then (and only then) its successor
    old_uid = old0["metadata"]["uid"]
    exited = _one(kube, "container-exited", uid=old_uid)
    assert exited["signal"] == 15 and exited["exitCode"] == 143
    deleted = _one(kube, "pod-deleted", uid=old_uid)
    created = _one(kube, "pod-created", uid=new0["metadata"]["uid"])
    assert _one(kube, "pod-deleting", uid=old_uid)["time"] <= exited["time"]
    assert exited["time"] <= deleted["time"] <= created["time"]
    # web-1 was left alone
    web1 = _pod(kube, "web-1")
    assert web1 is not None and web1["metadata"]["uid"] == old1["metadata"]["uid"]
    assert web1["metadata"]["labels"]["controller-revision-hash"] == old_rev

    def counted() -> dict[str, Any] | None:
        status = (kube.get("statefulsets", NS, "web") or {}).get("status") or {}
        return status if status.get("readyReplicas") == 2 else None

    status = kube.wait_for(counted, WAIT_S, "2 Ready replicas again")
    assert status["updatedReplicas"] == 1 and status["currentReplicas"] == 1
    assert status["currentRevision"] == old_rev and status["updateRevision"] == new_rev


def test_services_send_to_ready_pods_unless_they_publish_not_ready_ones(
    kube: KubeHarness,
) -> None:
    _ready_pod(kube, "web-0")
    web1 = _ready_pod(kube, "web-1")
    lb, every = kube.get("services", NS, "web-lb"), kube.get("services", NS, "web-all")
    assert lb is not None and every is not None

    def answers(service: dict[str, Any], count: int) -> set[str]:
        url = f"http://{service['spec']['clusterIP']}:8000/env.json"
        return {json.loads(_get(url))["POD_NAME"] for _ in range(count)}

    kube.wait_for(lambda: answers(lb, 4) == {"web-0", "web-1"}, WAIT_S, "web-lb to use both")
    ready_file = claim_dir(kube.dir, NS, "data-web-1") / "ready"
    ready_file.unlink()
    try:
        kube.wait_for(lambda: not _is_ready(_pod(kube, "web-1")), WAIT_S, "web-1 not Ready")

        def split() -> dict[str, Any] | None:
            ep = kube.get("endpoints", NS, "web-lb")
            subsets = (ep or {}).get("subsets") or [{}]
            ok = [a["targetRef"]["name"] for a in subsets[0].get("addresses") or []] == ["web-0"]
            return ep if ok and subsets[0].get("notReadyAddresses") else None

        ep = kube.wait_for(split, WAIT_S, "web-1 among the not-ready addresses of web-lb")
        (subset,) = ep["subsets"]
        assert [a["ip"] for a in subset["notReadyAddresses"]] == [web1["status"]["podIP"]]
        assert subset["ports"] == [{"port": 8080, "protocol": "TCP"}]  # the target port
        assert answers(lb, 6) == {"web-0"}
        assert answers(every, 6) == {"web-0", "web-1"}
        published = kube.get("endpoints", NS, "web-all")
        assert published is not None
        assert len(published["subsets"][0]["addresses"]) == 2
        assert "notReadyAddresses" not in published["subsets"][0]
    finally:
        ready_file.touch()
    _ready_pod(kube, "web-1")
    assert _one(kube, "not-ready", uid=web1["metadata"]["uid"])


def test_a_service_follows_the_label_the_operator_moves_between_pods(
    kube: KubeHarness,
) -> None:
    master = kube.get("services", NS, "web-master")
    assert master is not None
    url = f"http://{master['spec']['clusterIP']}:8000/env.json"

    def answers() -> set[str]:
        return {json.loads(_get(url))["POD_NAME"] for _ in range(4)}

    with pytest.raises(httpx.HTTPError):  # no endpoint: the connection is closed at once
        _get(url)
    kube.patch("pods", NS, "web-1", {"metadata": {"labels": {"role": "master"}}})
    kube.wait_for(lambda: _try(answers) == {"web-1"}, WAIT_S, "web-master to reach web-1")
    kube.patch("pods", NS, "web-1", {"metadata": {"labels": {"role": None}}})
    kube.patch("pods", NS, "web-0", {"metadata": {"labels": {"role": "master"}}})
    kube.wait_for(lambda: _try(answers) == {"web-0"}, WAIT_S, "web-master to move to web-0")
    endpoints = kube.get("endpoints", NS, "web-master")
    assert endpoints is not None
    (subset,) = endpoints["subsets"]
    assert [a["targetRef"]["name"] for a in subset["addresses"]] == ["web-0"]
    kube.patch("pods", NS, "web-0", {"metadata": {"labels": {"role": None}}})


def _try(answers: Callable[[], set[str]]) -> set[str] | None:
    """An answer, or None while the proxy still has no endpoint."""
    try:
        return answers()
    except httpx.HTTPError:
        return None


def test_a_killed_container_is_restarted_in_the_same_pod(kube: KubeHarness) -> None:
    before = _ready_pod(kube, "web-1")
    uid = before["metadata"]["uid"]
    (pid,) = kube.kill_pod(NS, "web-1")

    def restarted() -> dict[str, Any] | None:
        pod = _pod(kube, "web-1")
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount") == 1 and _is_ready(pod) else None

    pod = restarted_pod = kube.wait_for(restarted, WAIT_S, "web-1 restarted and Ready")
    assert restarted_pod["metadata"]["uid"] == uid
    (container,) = pod["status"]["containerStatuses"]
    terminated = container["lastState"]["terminated"]
    assert terminated["exitCode"] == 137 and terminated["signal"] == 9
    assert _one(kube, "container-exited", uid=uid, pid=pid)["signal"] == 9
    restart = _one(kube, "container-started", uid=uid, restartCount=1)
    assert restart["pid"] != pid
    assert start_time(pid) is None  # the killed process is gone, not orphaned


def test_deletion_is_sigterm_then_sigkill_after_the_grace_period(kube: KubeHarness) -> None:
    ignores = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring SIGTERM', flush=True); time.sleep(600)"
    )
    for name, spec in (
        (
            "stubborn",
            {
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "main", "command": ["python3", "-c", ignores]}],
            },
        ),
        (
            "stuck-init",  # an init container that never ends still goes on deletion
            {
                "terminationGracePeriodSeconds": 30,
                "initContainers": [{"name": "wait", "command": SLEEP}],
                "containers": [{"name": "main", "command": SLEEP}],
            },
        ),
    ):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        kube.create({**pod, "metadata": {"name": name, "namespace": NS}})

    def started(name: str, container: str) -> dict[str, Any] | None:
        found = _events(kube, "container-started", pod=name, container=container)
        return found[0] if found else None

    kube.wait_for(lambda: started("stubborn", "main"), WAIT_S, "stubborn to start")
    # Started is the spawn; the SIGTERM must come once its handler is in place (a
    # loaded machine once delivered it before, and the container died of it).
    log = kube.dir / "logs" / NS / "stubborn_main.log"
    kube.wait_for(
        lambda: log.exists() and "ignoring SIGTERM" in log.read_text(),
        WAIT_S,
        "stubborn to ignore SIGTERM",
    )
    kube.wait_for(lambda: started("stuck-init", "wait"), WAIT_S, "stuck-init's init container")
    stuck = _pod(kube, "stuck-init")
    assert stuck is not None and stuck["status"]["phase"] == "Pending"
    t0 = time.monotonic()
    kube.delete("pods", NS, "stubborn")
    kube.delete("pods", NS, "stuck-init")
    kube.wait_for(lambda: _gone(kube, "pods", "stuck-init"), WAIT_S, "stuck-init to go")
    kube.wait_for(lambda: _gone(kube, "pods", "stubborn"), WAIT_S, "stubborn to go")
    assert time.monotonic() - t0 < 25  # stuck-init did not wait out its 30 s of grace
    deleting = _one(kube, "pod-deleting", pod="stubborn")
    killed = _one(kube, "container-exited", pod="stubborn")
    assert killed["signal"] == 9 and killed["time"] - deleting["time"] >= 1.9
    assert _one(kube, "container-exited", pod="stuck-init", container="wait")["signal"] == 15
    assert not _events(kube, "container-started", pod="stuck-init", container="main")
    kube.wait_for(
        functools.partial(_events, kube, "pod-deleted", pod="stuck-init"), WAIT_S, "pod-deleted"
    )


def test_a_pod_waits_for_its_configmap_and_secret_to_appear(kube: KubeHarness) -> None:
    token = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "patient", "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "command": SLEEP,
                    "env": [token],
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/late"}],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": "late"}}],
        },
    }
    kube.create(pod)

    def waiting(reason: str) -> dict[str, Any] | None:
        statuses = ((_pod(kube, "patient") or {}).get("status") or {}).get("containerStatuses")
        waiting = ((statuses or [{}])[0].get("state") or {}).get("waiting") or {}
        return waiting if waiting.get("reason") == reason and waiting.get("message") else None

    creating = kube.wait_for(lambda: waiting("ContainerCreating"), WAIT_S, "ContainerCreating")
    assert "late" in creating["message"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": NS}}
    kube.create({**cm, "data": {"a": "1"}})
    config_error = kube.wait_for(
        lambda: waiting("CreateContainerConfigError"), WAIT_S, "CreateContainerConfigError"
    )
    assert "late" in config_error["message"]
    secret = {**cm, "kind": "Secret", "stringData": {"token": "t0k"}}
    kube.create(secret)
    running = _ready_pod(kube, "patient")
    assert running["status"]["containerStatuses"][0]["restartCount"] == 0
    kube.delete("pods", NS, "patient")


def test_a_recreate_deployment_replaces_its_pod_after_the_old_one_is_gone(
    kube: KubeHarness,
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "solo", "namespace": NS},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "solo"}},
            "template": {
                "metadata": {"labels": {"app": "solo"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "main", "image": "solo:1", "command": SLEEP}],
                },
            },
        },
    }
    kube.create(deployment)

    def solo_pods(image: str) -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in kube.list("pods", NS, label_selector="app=solo")
            if not p["metadata"].get("deletionTimestamp")
        ]
        ok = len(pods) == 1 and _is_ready(pods[0])
        ok = ok and pods[0]["status"]["containerStatuses"][0]["image"] == image
        return pods if ok else None

    (old,) = kube.wait_for(lambda: solo_pods("solo:1"), WAIT_S, "solo:1 Ready")
    assert old["metadata"]["name"].startswith("solo-")
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "solo:2"}]
    kube.patch("deployments", NS, "solo", patch, content_type="application/json-patch+json")
    (new,) = kube.wait_for(lambda: solo_pods("solo:2"), WAIT_S, "solo:2 Ready")
    assert new["metadata"]["name"] != old["metadata"]["name"]
    old_hash = old["metadata"]["labels"]["pod-template-hash"]
    assert new["metadata"]["labels"]["pod-template-hash"] != old_hash
    gone = _one(kube, "pod-deleted", uid=old["metadata"]["uid"])
    assert gone["time"] <= _one(kube, "pod-created", uid=new["metadata"]["uid"])["time"]

    def available() -> dict[str, Any] | None:
        status = (kube.get("deployments", NS, "solo") or {}).get("status") or {}
        return (
            status if status.get("updatedReplicas") == 1 and status.get("readyReplicas") else None
        )

    status = kube.wait_for(available, WAIT_S, "solo's status")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Available": "True",
        "Progressing": "True",
    }


def test_deleting_a_statefulset_cascades_to_pods_and_claims_per_policy(
    kube: KubeHarness,
) -> None:
    keep0 = _ready_pod(kube, "keep-0")
    # Deleted with Orphan and made again, a StatefulSet adopts its running pod.
    kube.kubectl("delete", "statefulset", "keep", "--cascade=orphan")
    pod = _pod(kube, "keep-0")
    assert pod is not None and not pod["metadata"].get("ownerReferences")
    (keep_sts,) = [o for o in _objects() if o["kind"] == "StatefulSet" and "keep" in str(o)]
    made = kube.create({**keep_sts, "metadata": {"name": "keep", "namespace": NS}})

    def adopted() -> dict[str, Any] | None:
        refs = (_pod(kube, "keep-0") or {}).get("metadata", {}).get("ownerReferences") or []
        status = (kube.get("statefulsets", NS, "keep") or {}).get("status") or {}
        ok = [r["uid"] for r in refs] == [made["metadata"]["uid"]] and status.get("readyReplicas")
        return status if ok else None

    kube.wait_for(adopted, WAIT_S, "keep-0 adopted by the new keep")
    assert _ready_pod(kube, "keep-0")["metadata"]["uid"] == keep0["metadata"]["uid"]
    assert len(_events(kube, "pod-created", pod="keep-0")) == 1  # never replaced
    pods = [_ready_pod(kube, f"web-{i}") for i in range(2)]
    dirs = [claim_dir(kube.dir, NS, f"data-web-{i}") for i in range(2)]
    keep_dir = claim_dir(kube.dir, NS, "data-keep-0")
    assert all(d.is_dir() for d in [*dirs, keep_dir])
    kube.kubectl("delete", "statefulset", "web", "keep", "--wait=false")
    for name in ("web-0", "web-1", "keep-0", "data-web-0", "data-web-1"):
        kind = "pods" if not name.startswith("data-") else "persistentvolumeclaims"
        kube.wait_for(functools.partial(_gone, kube, kind, name), WAIT_S, f"{name} to go")
    for pod in pods:  # (web-1 was killed once before)
        assert _events(kube, "container-exited", uid=pod["metadata"]["uid"])[-1]["signal"] == 15
    for i in range(2):  # the volume goes once the realiser sees the claim gone
        claim = f"data-web-{i}"
        kube.wait_for(functools.partial(_events, kube, "pvc-deleted", claim=claim), WAIT_S, claim)
        assert not dirs[i].exists()
    # whenDeleted: Retain (the default) keeps the claim and its data
    assert kube.get("persistentvolumeclaims", NS, "data-keep-0") is not None
    assert keep_dir.is_dir()

    def emptied() -> bool:
        return not (kube.get("endpoints", NS, "web") or {}).get("subsets")

    kube.wait_for(emptied, WAIT_S, "the web Endpoints to empty")


def test_stop_leaves_no_process_behind(kube: KubeHarness) -> None:
    pids = [pid for pod in kube.realised_pods() for pid in pod["pids"]]
    records = kube.realised_processes()
    assert pids and records
    kube.stop()  # raises if a realised process survived
    assert all(start_time(pid) is None for pid in pids)
    assert not [r for r in records if r.group_alive()]
