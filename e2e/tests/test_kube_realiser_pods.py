"""What the realiser makes of one pod, as pure functions: its environment and command
line (:mod:`podenv`), the text rewriting that stands in for its mount and network
namespaces (:mod:`substitute`), its probes' schedule and its reported status."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from rocketcluster.e2e.kube import podenv, volumes
from rocketcluster.e2e.kube.podstatus import ContainerState, phase, pod_status
from rocketcluster.e2e.kube.probes import ProbeSchedule
from rocketcluster.e2e.kube.substitute import Substitution, expand_vars

# --- podenv -----------------------------------------------------------------------------

POD: dict[str, Any] = {
    "metadata": {
        "name": "web-0",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"note": "hi"},
    },
    "spec": {"serviceAccountName": "runner"},
}
CONFIGMAPS: dict[str, Mapping[str, Any]] = {
    "cm": {"data": {"MODE": "fast", "SHARED": "from-cm", "greeting": "hello"}}
}
SECRETS: dict[str, Mapping[str, Any]] = {
    "sec": {"data": {"PASSWORD": base64.b64encode(b"s3cret").decode()}}
}


def _env(container: dict[str, Any], base: Mapping[str, str] | None = None) -> dict[str, str]:
    return podenv.container_env(
        POD,
        container,
        configmaps=CONFIGMAPS,
        secrets=SECRETS,
        pod_ip="127.10.0.7",
        node="realiser",
        base=base or {},
    )


def test_env_from_sources_then_env_in_order_with_value_from() -> None:
    container = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "cm"}},
            {"secretRef": {"name": "sec"}, "prefix": "DB_"},
        ],
        "env": [
            {"name": "SHARED", "value": "from-env"},  # env wins over envFrom
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "HELLO", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "greeting"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ],
        "resources": {"limits": {"cpu": "2"}},
    }
    env = _env(container, base={"PATH": "/bin", "MODE": "base"})
    assert env == {
        "PATH": "/bin",
        "MODE": "fast",
        "SHARED": "from-env",
        "greeting": "hello",
        "DB_PASSWORD": "s3cret",
        "NAME": "web-0",
        "NS": "ns",
        "IP": "127.10.0.7",
        "TIER": "front",
        "SA": "runner",
        "NODE": "realiser",
        "HELLO": "hello",
        "PW": "s3cret",
        "CPU": "2",
    }


def test_dollar_expansion_sees_only_what_was_defined_before() -> None:
    container = {
        "name": "c",
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "CONFIG", "value": "/etc/app/$(NAME).json"},
            {"name": "EARLY", "value": "$(LATER)-x"},  # not defined yet: kept as written
            {"name": "LATER", "value": "late"},
            {"name": "ESCAPED", "value": "$$(NAME) costs $$5 and $x"},
            {"name": "FROM_CM", "value": "$(MODE)"},
        ],
        "envFrom": [{"configMapRef": {"name": "cm"}}],
        "command": ["run", "--config=$(CONFIG)"],
        "args": ["$(LATER)", "$(MISSING)", "$$(LATER)"],
    }
    env = _env(container)
    assert env["CONFIG"] == "/etc/app/web-0.json"
    assert env["EARLY"] == "$(LATER)-x"
    assert env["ESCAPED"] == "$(NAME) costs $5 and $x"
    assert env["FROM_CM"] == "fast"
    # command and args see the whole environment
    argv = podenv.command_line(container, env)
    assert argv == ["run", "--config=/etc/app/web-0.json", "late", "$(MISSING)", "$(LATER)"]
    assert expand_vars("$(A)$(B)", {"A": "$(B)", "B": "b"}) == "$(B)b"  # one pass only


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"envFrom": [{"configMapRef": {"name": "nope"}}]}, 'ConfigMap "nope" not found'),
        ({"envFrom": [{"secretRef": {"name": "nope"}}]}, 'Secret "nope" not found'),
        (
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]},
            "couldn't find key k in ConfigMap cm",
        ),
        (
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "no", "key": "k"}}}]},
            'Secret "no" not found',
        ),
        (
            {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]},
            "unsupported fieldRef",
        ),
    ],
)
def test_a_missing_source_is_a_config_error(container: dict[str, Any], message: str) -> None:
    with pytest.raises(podenv.ConfigError, match=message):
        _env({"name": "c", **container})


def test_optional_sources_may_be_missing() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "nope", "optional": True}}],
        "env": [
            {
                "name": "X",
                "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k", "optional": True}},
            },
            {
                "name": "Y",
                "valueFrom": {"configMapKeyRef": {"name": "no", "key": "k", "optional": True}},
            },
        ],
    }
    assert _env(container) == {}


def test_a_container_without_command_cannot_run_as_a_process() -> None:
    with pytest.raises(podenv.ConfigError, match="has no command"):
        podenv.command_line({"name": "c", "image": "x:1", "args": ["a"]}, {})


def test_service_links_name_clusterip_services_only() -> None:
    services: list[Mapping[str, Any]] = [
        {
            "metadata": {"name": "my-db"},
            "spec": {
                "clusterIP": "127.20.0.5",
                "ports": [{"name": "sql", "port": 5432}, {"name": "admin", "port": 8080}],
            },
        },
        {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}},
    ]
    assert podenv.service_links(services) == {
        "MY_DB_SERVICE_HOST": "127.20.0.5",
        "MY_DB_SERVICE_PORT": "5432",
        "MY_DB_SERVICE_PORT_SQL": "5432",
        "MY_DB_SERVICE_PORT_ADMIN": "8080",
        "MY_DB_PORT": "tcp://127.20.0.5:5432",
    }


# --- volumes ------------------------------------------------------------------------------


def test_volume_files_name_the_node_and_keep_binary_configmap_keys_as_bytes() -> None:
    fields = [
        {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}},
        {"path": "host", "fieldRef": {"fieldPath": "status.hostIP"}},
    ]
    downward = volumes.volume_files(
        {"name": "info", "downwardAPI": {"items": fields}},
        pod=POD,  # no nodeName yet: the node it runs on
        configmaps={},
        secrets={},
        pod_ip="127.10.0.7",
        node="node-a",
    )
    assert downward == {"node": (b"node-a", False), "host": (b"127.0.0.1", False)}
    blob = b"\xff\x00\xfe"
    configmaps: dict[str, Mapping[str, Any]] = {
        "cm": {"data": {"text": "hi"}, "binaryData": {"blob": base64.b64encode(blob).decode()}}
    }
    files = volumes.volume_files(
        {"name": "c", "configMap": {"name": "cm"}},
        pod=POD,
        configmaps=configmaps,
        secrets={},
        pod_ip="127.10.0.7",
        node="node-a",
    )
    assert files == {"text": (b"hi", True), "blob": (blob, True)}


# --- substitute ---------------------------------------------------------------------------


def _names(name: str) -> str | None:
    return {
        "web-1.web.ns.svc.cluster.local": "127.10.0.2",
        "web-1.web.ns.svc": "127.10.0.2",
        "lb.ns.svc": "127.20.0.1",
    }.get(name)


SUBST = Substitution(
    mounts=(("/data", "/h/claim"), ("/data/logs", "/h/logs"), ("/etc/app/", "/h/cfg")),
    pod_ip="127.10.0.1",
    resolve=_names,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/data/logs/x.log", "/h/logs/x.log"),  # the longest mount path wins
        ("/data/store", "/h/claim/store"),
        ("/data", "/h/claim"),
        ("--dir=/data/logs", "--dir=/h/logs"),
        ('{"path": "/etc/app/a.json"}', '{"path": "/h/cfg/a.json"}'),
        ("/database /mnt/data /data2", "/database /mnt/data /data2"),  # whole paths only
        ("web-1.web.ns.svc.cluster.local:8080", "127.10.0.2:8080"),
        ("http://web-1.web.ns.svc/x", "http://127.10.0.2/x"),
        ("lb.ns.svc:80;unknown.ns.svc:1", "127.20.0.1:80;unknown.ns.svc:1"),
        ("xweb-1.web.ns.svc", "xweb-1.web.ns.svc"),  # part of another name
        ("web-1.web.ns.svc.example.com", "web-1.web.ns.svc.example.com"),
        ("0.0.0.0:8080 10.0.0.0 0.0.0.01", "127.10.0.1:8080 10.0.0.0 0.0.0.01"),
        ("line1 /data\n/data/logs\n", "line1 /h/claim\n/h/logs\n"),
    ],
)
def test_substitution_rewrites_paths_names_and_the_any_address(text: str, expected: str) -> None:
    assert SUBST.apply(text) == expected


def test_substitution_is_one_pass_and_leaves_binary_files_alone() -> None:
    # the host path of one mount contains another mount's path: not rewritten twice
    subst = Substitution(mounts=(("/data", "/tmp/pod/data"), ("/tmp", "/h/tmp")))
    assert subst.apply("/data /tmp") == "/tmp/pod/data /h/tmp"
    assert SUBST.apply_bytes(b"\xff\xfe/data") == b"\xff\xfe/data"
    assert SUBST.apply_bytes(b"at /data") == b"at /h/claim"
    assert Substitution().apply("0.0.0.0 /data") == "0.0.0.0 /data"


# --- probes -------------------------------------------------------------------------------


def test_probe_schedule_timing() -> None:
    default = ProbeSchedule({}, initial=False)
    assert (default.delay, default.period, default.timeout) == (0.0, 10.0, 1.0)
    spec = {"initialDelaySeconds": 3, "periodSeconds": 20, "timeoutSeconds": 2}
    assert ProbeSchedule(spec, initial=False, period_cap=1.5).period == 1.5
    assert ProbeSchedule(spec, initial=False, period_cap=1.5).delay == 3.0
    assert ProbeSchedule({"periodSeconds": 0.1}, initial=False).period == 0.5


def test_probe_schedule_thresholds() -> None:
    readiness = ProbeSchedule({"failureThreshold": 3}, initial=False)
    assert not readiness.result
    assert readiness.record(True) and readiness.result  # one success is enough
    assert not readiness.record(False) and not readiness.record(False)
    assert readiness.record(False) and not readiness.result  # the third failure
    assert not readiness.record(False)
    twice = ProbeSchedule({"successThreshold": 2}, initial=False)
    assert not twice.record(True)
    assert not twice.record(False) and not twice.record(True)  # the count starts over
    assert twice.record(True) and twice.result
    liveness = ProbeSchedule({"failureThreshold": 1}, initial=True)
    assert liveness.result and liveness.record(False) and not liveness.result


def test_probe_schedule_failed_is_the_failure_threshold_in_a_row() -> None:
    startup = ProbeSchedule({"failureThreshold": 2}, initial=False)
    startup.record(False)
    assert not startup.failed
    startup.record(True)
    startup.record(False)
    assert not startup.failed  # a success started the count over
    startup.record(False)
    assert startup.failed
    liveness = ProbeSchedule({}, initial=True)
    liveness.record(False)
    liveness.record(False)
    assert not liveness.failed and liveness.result
    liveness.record(False)
    assert liveness.failed and not liveness.result


# --- podstatus ----------------------------------------------------------------------------


def test_phase_follows_the_containers_and_the_restart_policy() -> None:
    def state(kind: str, code: int | None = None, restarts: int = 0) -> ContainerState:
        c = ContainerState("c", "img", state=kind, exit_code=code, restart_count=restarts)
        c.started_at = "t" if kind != "waiting" else None
        return c

    assert phase("Always", False, False, [state("waiting")]) == "Pending"
    assert phase("Always", True, False, [state("waiting")]) == "Pending"
    assert phase("Always", True, False, [state("running")]) == "Running"
    assert phase("Always", True, False, [state("terminated", 0)]) == "Running"  # restarting
    assert phase("Always", True, False, [state("waiting", restarts=2)]) == "Running"
    assert phase("OnFailure", True, False, [state("terminated", 0)]) == "Succeeded"
    assert phase("Never", True, False, [state("terminated", 0)]) == "Succeeded"
    assert phase("Never", True, False, [state("terminated", 1)]) == "Failed"
    assert phase("Never", False, True, [state("waiting")]) == "Failed"  # an init failed
    both = [state("terminated", 0), state("running")]
    assert phase("Never", True, False, both) == "Running"


def test_pod_status_conditions_keep_their_transition_time_while_they_hold() -> None:
    container = ContainerState("web", "web:1")
    init = ContainerState("setup", "tools:1", state="terminated", exit_code=0)
    init.reason = "Completed"

    def status(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
        return pod_status(
            pod,
            init=[init],
            containers=[container],
            initialized=True,
            init_failed=False,
            pod_ip="127.10.0.4",
            start_time="t0",
            now=now,
        )

    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {}}
    first = status(pod, "t1")
    conditions = {c["type"]: c for c in first["conditions"]}
    assert [c["type"] for c in first["conditions"]] == [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
    ]
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "ContainersNotReady"
    assert first["phase"] == "Pending" and first["podIP"] == "127.10.0.4"
    assert first["podIPs"] == [{"ip": "127.10.0.4"}] and first["startTime"] == "t0"
    (waiting,) = first["containerStatuses"]
    assert waiting["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert first["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

    container.state, container.started_at, container.pid = "running", "t2", 42
    container.ready = container.started = True
    second = status({**pod, "status": first}, "t3")
    ready = {c["type"]: c for c in second["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "t3"
    assert {c["type"]: c for c in second["conditions"]}["PodScheduled"][
        "lastTransitionTime"
    ] == "t1"
    (running,) = second["containerStatuses"]
    assert running["state"] == {"running": {"startedAt": "t2"}}
    assert running["ready"] and running["started"] and running["containerID"] == "process://42"
    third = status({**pod, "status": second}, "t4")
    assert {c["type"]: c for c in third["conditions"]}["Ready"]["lastTransitionTime"] == "t3"


def test_a_restarted_container_reports_its_last_state() -> None:
    container = ContainerState("web", "web:1", state="terminated", pid=7)
    container.started_at, container.finished_at = "t1", "t2"
    container.exit_code, container.signal, container.reason = 137, 9, "Error"
    container.last_state = container.terminated_state()
    container.state, container.reason = "waiting", "CrashLoopBackOff"
    container.message, container.restart_count = "back-off 1s restarting failed container", 1
    reported = container.to_status()
    assert reported["restartCount"] == 1
    assert reported["state"] == {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 1s restarting failed container",
        }
    }
    assert reported["lastState"] == {
        "terminated": {
            "exitCode": 137,
            "signal": 9,
            "reason": "Error",
            "startedAt": "t1",
            "finishedAt": "t2",
            "containerID": "process://7",
        }
    }
