"""``healthReports.spark``: the engine the health reports run on, as the operator
renders and decides it — local (one pod), kubernetes (the CronJob's pod is the driver
of executor pods), sparkOperator (a ScheduledSparkApplication, only where the Kubeflow
Spark Operator's CRD is served) and standalone (the user's Spark master).

Every object is checked with kubernetes-validate (strict) or, for the Spark
Operator's kind, against its vendored CRD schema; the driver's Role is exactly what
Spark's client mode calls (each verb with the Spark code that calls it); the
operator's decisions — the missing CRD, a failed run's executors — run against the
kmock API emulator with the operator's real client."""

from __future__ import annotations

import copy
import importlib.metadata
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kmock
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.crdgen import strict_schema
from rocketcluster.api.status import ConditionType
from rocketcluster.e2e.crd_check import crd_problems
from rocketcluster.operator.kube.apply import MergePatchApplier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.orchestrate.assess import Assessment, assess
from rocketcluster.operator.reconcile import (
    SPARK_OPERATOR_MISSING,
    ClusterMemory,
    ClusterReconciler,
)
from rocketcluster.operator.render import health_reports, network, render_cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "health-reports-kubernetes.yaml"
SPARK_OPERATOR_CRD = (
    Path(__file__).parent
    / "data"
    / "spark-operator"
    / "sparkoperator.k8s.io_scheduledsparkapplications.yaml"
)
OLDEST, NEWEST = "1.27.0", "1.37.0"  # as test_render.py: the Kubernetes versions we support
SECURE = {"auth": {"enabled": True}, "tls": {"enabled": True, "secretName": "ops-tls"}}


def _cluster(mode: str = "kubernetes", *, security: bool = False, **spark: Any) -> RocketCluster:
    data = load_manifest(EXAMPLE).model_dump(mode="json", by_alias=True)
    data["metadata"] = {"name": "ops", "namespace": "team-a", "uid": "u-1"}
    data["spec"]["healthReports"]["spark"].update({"mode": mode, **spark})
    if security:
        data["spec"]["security"] = copy.deepcopy(SECURE)
    return RocketCluster.model_validate(data)


def _reports(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["metadata"]["labels"][kube.LABEL_COMPONENT] == health_reports.COMPONENT
    ]


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    return found


def _pod(cron_job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def _confs(args: list[str]) -> dict[str, str]:
    pairs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--conf"]
    return dict(p.split("=", 1) for p in pairs)


def _arg(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def _submit(cluster: RocketCluster) -> tuple[list[str], list[str]]:
    """spark-submit's own arguments and the entry point's."""
    (container,) = _pod(_one(render_cluster(cluster), "CronJob"))["containers"]
    args: list[str] = container["args"]
    entry = args.index(health_reports.ENTRY_POINT)
    return args[:entry], args[entry + 1 :]


def _template(cluster: RocketCluster) -> dict[str, Any]:
    config_map = _one(render_cluster(cluster), "ConfigMap", "ops-health-report-executor")
    template: dict[str, Any] = yaml.safe_load(config_map["data"][health_reports.TEMPLATE_FILE])
    return template


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# -- the spec -------------------------------------------------------------------------


def test_local_is_the_default_and_renders_no_executor_machinery() -> None:
    data = load_manifest(REPO / "examples" / "health-reports.yaml")
    assert data.spec.health_reports is not None
    assert data.spec.health_reports.spark.mode.value == "local"
    kinds = [o["kind"] for o in _reports(render_cluster(data))]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "CronJob"]


def test_standalone_needs_a_master_and_the_others_refuse_one() -> None:
    with pytest.raises(ValidationError, match="standalone needs master"):
        _cluster("standalone")
    for mode in ("local", "kubernetes", "sparkOperator"):
        with pytest.raises(ValidationError, match="for mode standalone only"):
            _cluster(mode, master="spark://m:7077")
    with pytest.raises(ValidationError, match="master"):
        _cluster("standalone", master="http://m:8080")
    assert _cluster("standalone", master="spark://m1:7077,m2.example:7077")


def _manifest(spark: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "ops"},
        "spec": {"healthReports": {"spark": spark}},
    }


def test_the_crd_says_the_same_as_the_model() -> None:
    where = ".spec.healthReports.spark"
    assert crd_problems(_manifest({"mode": "standalone"})) == [
        f"{where}: mode standalone needs master: the spark://host:port URL of your Spark master"
    ]
    assert crd_problems(_manifest({"mode": "kubernetes", "master": "spark://m:7077"})) == [
        f"{where}: master is for mode standalone only: local runs in the report's pod, "
        "kubernetes and sparkOperator run executor pods"
    ]
    assert crd_problems(_manifest({"master": "spark://m:7077"})) != []  # local by default
    assert crd_problems(_manifest({"mode": "standalone", "master": "spark://m:7077"})) == []
    assert crd_problems(_manifest({"mode": "sparkOperator", "executors": 8})) == []
    assert crd_problems(_manifest({"mode": "kubernetes", "executorMemory": "2 GB"})) != []
    assert crd_problems(_manifest({"mode": "yarn"})) != []


def test_shuffle_partitions_are_two_per_executor_core_and_at_least_four() -> None:
    def partitions(**spark: Any) -> str:
        submit, _ = _submit(_cluster(**spark))
        return _confs(submit)["spark.sql.shuffle.partitions"]

    assert partitions(executors=4, executorCores=2) == "16"
    assert partitions(executors=1, executorCores=1) == "4"
    standalone = _cluster("standalone", master="spark://m:7077", executors=3, executorCores=2)
    submit, _ = _submit(standalone)
    assert _confs(submit)["spark.sql.shuffle.partitions"] == "12"
    # local mode leaves it to the jobs (nothing set by spark-submit).
    submit, _ = _submit(_cluster("local"))
    assert "spark.sql.shuffle.partitions" not in _confs(submit)


# -- every object valid ---------------------------------------------------------------


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("security", [False, True], ids=["plain", "tls-auth"])
@pytest.mark.parametrize("mode", ["kubernetes", "standalone", "sparkOperator"])
def test_every_object_is_valid_kubernetes(mode: str, security: bool, version: str) -> None:
    master = {"master": "spark://spark-master:7077"} if mode == "standalone" else {}
    objects = _reports(render_cluster(_cluster(mode, security=security, **master)))
    assert objects
    for obj in objects:
        if obj["kind"] == health_reports.SCHEDULED_SPARK_APPLICATION:
            continue  # not a kind of Kubernetes': the test below checks it
        kubernetes_validate.validate(obj, version, strict=True)
    if mode == "kubernetes":  # the executor pod template is a valid Pod too
        kubernetes_validate.validate(_template(_cluster(security=security)), version, strict=True)


def _spark_operator_validator() -> jsonschema.Draft7Validator:
    (crd,) = [d for d in yaml.safe_load_all(SPARK_OPERATOR_CRD.read_text()) if d]
    assert crd["metadata"]["name"] == health_reports.SPARK_OPERATOR_CRD
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    group = crd["spec"]["group"]
    assert f"{group}/{version['name']}" == health_reports.SPARK_OPERATOR_API
    return jsonschema.Draft7Validator(strict_schema(version["schema"]["openAPIV3Schema"]))


@pytest.mark.parametrize("security", [False, True], ids=["plain", "tls-auth"])
def test_the_scheduled_spark_application_is_valid_for_the_spark_operator(security: bool) -> None:
    application = _one(
        render_cluster(_cluster("sparkOperator", security=security)), "ScheduledSparkApplication"
    )
    validator = _spark_operator_validator()
    problems = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(application)
    ]
    assert problems == []
    # Not vacuous: a misspelt field and a wrong type are refused.
    wrong = copy.deepcopy(application)
    wrong["spec"]["template"]["mainApplicationFiel"] = "local:///x.py"
    assert not validator.is_valid(wrong)
    wrong = copy.deepcopy(application)
    wrong["spec"]["template"]["executor"]["instances"] = "4"
    assert not validator.is_valid(wrong)


def test_the_scheduled_spark_application_runs_the_same_entry_point_on_schedule() -> None:
    cluster = _cluster("sparkOperator")
    objects = render_cluster(cluster)
    assert not [o for o in objects if o["kind"] == "CronJob"]
    application = _one(objects, "ScheduledSparkApplication", "ops-health-report")
    spec = application["spec"]
    assert spec["schedule"] == "@hourly" and spec["concurrencyPolicy"] == "Forbid"
    assert (spec["successfulRunHistoryLimit"], spec["failedRunHistoryLimit"]) == (3, 1)
    template = spec["template"]
    assert template["type"] == "Python" and template["mode"] == "cluster"
    assert template["mainApplicationFile"] == f"local://{health_reports.ENTRY_POINT}"
    assert template["arguments"] == health_reports.entry_point_args(cluster)
    assert _arg(template["arguments"], "--master") == ["none"]
    assert template["image"] == cluster.spec.health_reports_image()
    assert template["restartPolicy"]["type"] == "OnFailure"
    assert template["sparkConf"]["spark.sql.shuffle.partitions"] == "16"
    for key, value in health_reports.DRIVER_RBAC_CONFS:
        assert template["sparkConf"][key] == value
    driver, executor = template["driver"], template["executor"]
    assert driver["serviceAccount"] == "ops-health-report" and "serviceAccount" not in executor
    assert (executor["instances"], executor["cores"], executor["memory"]) == (4, 2, "2g")
    assert executor["memoryOverhead"] == "1g"
    volumes = {v["name"]: v for v in template["volumes"]}
    for part in (driver, executor):
        mounts = {m["mountPath"]: m["name"] for m in part["volumeMounts"]}
        assert volumes[mounts["/reports"]]["persistentVolumeClaim"] == {
            "claimName": "ops-health-reports"
        }
        assert "emptyDir" in volumes[mounts["/tmp"]]
        assert part["podSecurityContext"]["runAsUser"] == 10001
        assert part["securityContext"]["readOnlyRootFilesystem"] is True
        (container,) = part["template"]["spec"]["containers"]
        assert container["command"] == list(health_reports.LAUNCHER)
        env = {e["name"]: e for e in part["env"]}
        assert env["PYSPARK_PYTHON"]["value"] == health_reports.IMAGE_PYTHON
        assert env["HOME"]["value"] == "/tmp"
    assert driver["template"]["spec"]["automountServiceAccountToken"] is True
    assert executor["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_spark_version_named_is_the_one_the_jobs_are_locked_to() -> None:
    assert importlib.metadata.version("pyspark") == health_reports.SPARK_VERSION


# -- kubernetes ---------------------------------------------------------------------------


def test_the_cron_job_pod_is_the_driver_in_client_mode_on_kubernetes() -> None:
    cluster = _cluster()
    submit, job = _submit(cluster)
    assert _arg(submit, "--master") == ["k8s://https://kubernetes.default.svc"]
    assert _arg(submit, "--deploy-mode") == ["client"]
    confs = _confs(submit)
    assert confs["spark.driver.host"] == "ops-health-report-driver.team-a.svc.cluster.local"
    assert confs["spark.driver.bindAddress"] == "0.0.0.0"
    assert confs["spark.kubernetes.namespace"] == "team-a"
    assert confs["spark.kubernetes.container.image"] == cluster.spec.health_reports_image()
    assert confs["spark.executor.instances"] == "4"
    assert (confs["spark.executor.cores"], confs["spark.executor.memory"]) == ("2", "2g")
    assert confs["spark.executor.memoryOverhead"] == "1g"
    # The executors mount the reports' claim at the same path as the driver.
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.reports"
    assert confs[f"{volume}.options.claimName"] == "ops-health-reports"
    assert confs[f"{volume}.mount.path"] == "/reports"
    # The entry point is unchanged: spark-submit chooses the master.
    assert _arg(job, "--master") == ["none"] and _arg(job, "--out") == ["/reports"]
    pod = _pod(_one(render_cluster(cluster), "CronJob"))
    assert pod["serviceAccountName"] == "ops-health-report"
    assert pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    env = _env(container)
    # The driver pod's own name (its executors' owner), from the downward API.
    assert confs["spark.kubernetes.driver.pod.name"] == f"$({kube.ENV_POD_NAME})"
    assert env[kube.ENV_POD_NAME] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # No longer loopback: executors connect to the driver.
    assert env["SPARK_LOCAL_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    ports = {p["containerPort"] for p in container["ports"]}
    assert {int(confs["spark.driver.port"]), int(confs["spark.driver.blockManager.port"])} == ports
    # The executor template, mounted where spark-submit is told to read it.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    template_file = confs["spark.kubernetes.executor.podTemplateFile"]
    assert template_file == f"{mounts['executor-template']}/{health_reports.TEMPLATE_FILE}"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["executor-template"]["configMap"]["name"] == "ops-health-report-executor"


def test_the_driver_service_selects_the_running_driver_and_no_executor() -> None:
    cluster = _cluster()
    objects = render_cluster(cluster)
    service = _one(objects, "Service", "ops-health-report-driver")
    assert service["spec"]["clusterIP"] == "None"
    selector = service["spec"]["selector"]
    driver_labels = _one(objects, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert selector.items() <= driver_labels.items()
    executor_labels = {
        **_template(cluster)["metadata"]["labels"],
        health_reports.SPARK_ROLE_LABEL: "executor",  # what Spark adds
    }
    assert not selector.items() <= executor_labels.items()
    submit, _ = _submit(cluster)
    confs = _confs(submit)
    assert {p["port"] for p in service["spec"]["ports"]} == {
        int(confs["spark.driver.port"]),
        int(confs["spark.driver.blockManager.port"]),
    }


def test_executors_run_as_the_operator_s_other_pods_do() -> None:
    template = _template(_cluster(security=True))
    spec = template["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["name"] == health_reports.EXECUTOR_CONTAINER
    assert container["command"] == list(health_reports.LAUNCHER)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    env = _env(container)
    assert env["PYSPARK_PYTHON"] == health_reports.IMAGE_PYTHON and env["HOME"] == "/tmp"
    assert env["SPARK_LOCAL_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # They read the admin APIs themselves: the token, and the CA with TLS.
    assert env["ROCKETCLUSTER_ADMIN_TOKEN"]["secretKeyRef"]["name"] == "ops-admin-token"
    assert env["SSL_CERT_FILE"] == "/etc/rocketcluster/tls/ca.crt"
    assert volumes[mounts["/etc/rocketcluster/tls"]]["secret"]["secretName"] == "ops-tls"


def test_the_network_policies_admit_executors_to_the_admin_ports() -> None:
    """As they admit the report's (driver's) pod: the executors read the admin APIs."""
    cluster = _cluster()
    executor_labels = _template(cluster)["metadata"]["labels"]
    driver_labels = _one(render_cluster(cluster), "CronJob")["spec"]["jobTemplate"]["spec"][
        "template"
    ]["metadata"]["labels"]
    policies = [o for o in render_cluster(cluster) if o["kind"] == "NetworkPolicy"]
    admin_policies = [network.brokers_name(cluster), network.controllers_name(cluster)]
    for policy in policies:
        if policy["metadata"]["name"] not in admin_policies:
            continue
        (admin,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8080]

        def admitted(pod_labels: dict[str, str], rule: dict[str, Any] = admin) -> bool:
            return any(
                "namespaceSelector" not in peer
                and peer["podSelector"].get("matchLabels", {}).items() <= pod_labels.items()
                and peer["podSelector"].get("matchLabels")
                for peer in rule["from"]
            )

        assert admitted(driver_labels) and admitted(executor_labels), policy["metadata"]["name"]


def test_the_operator_s_claim_is_read_write_many_when_executors_write_it() -> None:
    def modes(cluster: RocketCluster) -> list[str]:
        claim = _one(render_cluster(cluster), "PersistentVolumeClaim", "ops-health-reports")
        access: list[str] = claim["spec"]["accessModes"]
        return access

    assert modes(_cluster("kubernetes")) == ["ReadWriteMany"]
    assert modes(_cluster("sparkOperator")) == ["ReadWriteMany"]
    assert modes(_cluster("local")) == ["ReadWriteOnce"]
    assert modes(_cluster("standalone", master="spark://m:7077")) == ["ReadWriteOnce"]


# What a Spark driver calls on Kubernetes with the confs DRIVER_RBAC_CONFS sets, read
# from Spark's resource-managers/kubernetes/core (scheduler/cluster/k8s), on the
# fabric8 client 7 Spark ships with: a label-selected delete is one DELETE of the
# collection (deletecollection), a delete by name is delete.
WHY: dict[tuple[str, str], str] = {
    ("pods", "get"): "ExecutorPodsAllocator reads the driver pod named by "
    "spark.kubernetes.driver.pod.name, to make it the executors' owner",
    ("pods", "create"): "ExecutorPodsAllocator.requestNewExecutors creates each executor pod",
    ("pods", "list"): "ExecutorPodsPollingSnapshotSource resyncs the executor pods every "
    "30 s; waitUntilReady on the driver pod informs on it (list, then watch); "
    "doKillExecutors lists the executors still running",
    ("pods", "watch"): "ExecutorPodsWatchSnapshotSource watches the executor pods; "
    "waitUntilReady on the driver pod",
    ("pods", "delete"): "ExecutorPodsLifecycleManager deletes a failed or finished "
    "executor by name; the allocator deletes a pod it could not complete",
    ("pods", "deletecollection"): "ExecutorPodsAllocator.stop deletes all executors by "
    "label at the end of the run, and the timed-out and excess pending ones; "
    "doKillExecutors the ones still running",
}
# What it would call without those confs, and why it is not granted.
NOT_GRANTED: dict[str, str] = {
    "configmaps": "spark.kubernetes.executor.disableConfigMap: no executor ConfigMap "
    "(KubernetesClusterSchedulerBackend.setUpExecutorConfigMap creates it, stop deletes "
    "it; it would carry only SPARK_CONF_DIR files, which the image has none of)",
    "persistentvolumeclaims": "ownPersistentVolumeClaim and reusePersistentVolumeClaim "
    "false: the executors mount an existing claim; nothing to list, create or delete",
    "services": "service.deleteOnTermination false: client mode creates no driver "
    "Service (the operator renders it), so stop has none to delete",
}


def test_the_driver_role_is_exactly_what_spark_s_client_mode_calls() -> None:
    cluster = _cluster()
    role = _one(render_cluster(cluster), "Role", "ops-health-report")
    granted = {
        (resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if group == ""
    }
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    assert not any("resourceNames" in rule for rule in role["rules"])
    assert granted == set(WHY)
    assert not {resource for resource, _ in granted} & set(NOT_GRANTED)
    # ... which holds only with the confs that keep Spark from calling more.
    submit, _ = _submit(cluster)
    confs = _confs(submit)
    for key, value in health_reports.DRIVER_RBAC_CONFS:
        assert confs[key] == value
    # Bound to the driver's account only.
    binding = _one(render_cluster(cluster), "RoleBinding", "ops-health-report")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ops-health-report", "namespace": "team-a"}
    ]


# -- standalone ---------------------------------------------------------------------------


def test_standalone_is_a_client_mode_driver_against_the_user_s_master() -> None:
    cluster = _cluster("standalone", security=True, master="spark://spark-master:7077")
    objects = _reports(render_cluster(cluster))
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "CronJob"]
    submit, _ = _submit(cluster)
    assert _arg(submit, "--master") == ["spark://spark-master:7077"]
    assert _arg(submit, "--deploy-mode") == ["client"]
    confs = _confs(submit)
    assert confs["spark.driver.host"] == f"$({kube.ENV_POD_IP})"
    assert confs["spark.driver.bindAddress"] == "0.0.0.0"
    assert confs["spark.cores.max"] == "8"  # 4 executors x 2 cores
    assert (confs["spark.executor.cores"], confs["spark.executor.memory"]) == ("2", "2g")
    assert confs["spark.executorEnv.PYSPARK_PYTHON"] == health_reports.IMAGE_PYTHON
    assert confs["spark.executorEnv.ROCKETCLUSTER_ADMIN_TOKEN"] == "$(ROCKETCLUSTER_ADMIN_TOKEN)"
    assert confs["spark.executorEnv.SSL_CERT_FILE"] == "/etc/rocketcluster/tls/ca.crt"
    pod = _pod(_one(objects, "CronJob"))
    assert pod["automountServiceAccountToken"] is False
    env = _env(pod["containers"][0])
    assert env[kube.ENV_POD_IP] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["SPARK_LOCAL_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "ROCKETCLUSTER_ADMIN_TOKEN" in env


# -- the operator's decisions, against the API emulator -----------------------------------


def _pod_object(
    name: str, role: str, phase: str, owner: str | None = None, *, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "labels": {**health_reports.pod_selector(_cluster()), "spark-role": role},
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": f"uid-{owner}"}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"phase": phase}}


def test_executors_whose_driver_is_gone_or_stopped_are_chosen() -> None:
    pods = [
        _pod_object("run-a", "driver", "Running"),
        _pod_object("run-a-exec-1", "executor", "Running", "run-a"),
        _pod_object("run-b", "driver", "Failed"),
        _pod_object("run-b-exec-1", "executor", "Running", "run-b"),
        _pod_object("run-b-exec-2", "executor", "Pending", "run-b"),
        _pod_object("run-c-exec-1", "executor", "Running", "run-c"),  # driver deleted
        _pod_object("run-d", "driver", "Running", deleting=True),
        _pod_object("run-d-exec-1", "executor", "Running", "run-d"),
        _pod_object("run-e-exec-1", "executor", "Running", "run-c", deleting=True),
        _pod_object("stranger-exec", "executor", "Running"),  # no driver as owner
    ]
    assert health_reports.orphaned_executors(pods) == [
        "run-b-exec-1",
        "run-b-exec-2",
        "run-c-exec-1",
        "run-d-exec-1",
    ]
    assert health_reports.orphaned_executors(pods[:2]) == []
    assert health_reports.orphaned_executors([]) == []


@pytest.fixture
async def api() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator):
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        emulator.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", verbs=verbs, namespaced=True)
        yield emulator


def _client(api: kmock.KubernetesEmulator) -> KubeClient:
    return KubeClient(Connection(server=str(api.url).rstrip("/")))


async def _names(client: KubeClient) -> set[str]:
    return {p["metadata"]["name"] for p in await client.list("v1", "Pod", "team-a", {})}


async def test_the_reconciler_deletes_a_failed_run_s_executors(
    api: kmock.KubernetesEmulator,
) -> None:
    events: list[tuple[str, str, str]] = []
    async with _client(api) as client, httpx.AsyncClient() as http:
        for pod in (
            _pod_object("run-a", "driver", "Failed"),
            _pod_object("run-a-exec-1", "executor", "Running", "run-a"),
            _pod_object("run-b", "driver", "Running"),
            _pod_object("run-b-exec-1", "executor", "Running", "run-b"),
        ):
            await client.create(pod)
        other = copy.deepcopy(_pod_object("x-exec-1", "executor", "Running", "gone"))
        other["metadata"]["labels"][kube.LABEL_INSTANCE] = "another-cluster"
        await client.create(other)
        reconciler = ClusterReconciler(
            client, MergePatchApplier(client), http, lambda *e: events.append(e)
        )
        await reconciler._clean_executors(_cluster())
        assert await _names(client) == {"run-a", "run-b", "run-b-exec-1", "x-exec-1"}
        assert events == [("Normal", "SparkExecutorRemoved", "run-a-exec-1: its driver is gone")]
        # Other modes leave pods alone.
        await reconciler._clean_executors(_cluster("local"))
        assert len(events) == 1


async def test_without_the_spark_operator_s_crd_the_status_says_to_install_it(
    api: kmock.KubernetesEmulator,
) -> None:
    events: list[tuple[str, str, str]] = []
    cluster = _cluster("sparkOperator")
    rendered = render_cluster(cluster)
    async with _client(api) as client, httpx.AsyncClient() as http:
        reconciler = ClusterReconciler(
            client, MergePatchApplier(client), http, lambda *e: events.append(e)
        )
        memory = ClusterMemory()
        kept, notices = await reconciler._optional_engines(cluster, rendered, memory)
        assert [o for o in kept if o["kind"] == "ScheduledSparkApplication"] == []
        assert len(kept) == len(rendered) - 1
        ((reason, message),) = notices
        assert reason == SPARK_OPERATOR_MISSING
        assert "install the Kubeflow Spark Operator" in message
        assert health_reports.SPARK_OPERATOR_CRD in message
        await reconciler._optional_engines(cluster, rendered, memory)
        assert [e[:2] for e in events] == [("Warning", SPARK_OPERATOR_MISSING)]  # once
        status = assess(Assessment(1, "img", (), None, {}, notices=notices))
        (warning,) = [c for c in status.conditions if c.type == ConditionType.WARNING.value]
        assert (warning.status, warning.reason, warning.message) == (
            "True",
            SPARK_OPERATOR_MISSING,
            message,
        )
        # Installed: rendered as it is, no notice.
        api.resources["sparkoperator.k8s.io/v1beta2/scheduledsparkapplications"] = (
            kmock.ResourceInfo(
                kind="ScheduledSparkApplication",
                verbs={"get", "list", "create", "patch", "delete"},
                namespaced=True,
            )
        )
        kept, notices = await reconciler._optional_engines(cluster, rendered, memory)
        assert kept == rendered and notices == ()
        # The other modes never ask.
        local = _cluster("local")
        assert await reconciler._optional_engines(local, render_cluster(local), memory) == (
            render_cluster(local),
            (),
        )
