"""The Spark health reports the operator renders behind ``spec.healthReports``: one
CronJob running spark-submit in local mode on the jobs' entry point against the
controllers' admin Services, its volume and its price table — and their removal when
healthReports goes (against the kmock API emulator, with the operator's real client).

The CronJob's arguments are checked here against the contract of
``rocketcluster.jobs.run`` as written down in render/health_reports.py; a test that
parses them with the entry point's own argument parser belongs next to run.py once
it exists (spark-jobs/tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.operator import prune
from rocketcluster.operator.kube.apply import MergePatchApplier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.reconcile import ClusterMemory, ClusterReconciler
from rocketcluster.operator.render import health_reports, render_cluster

REPO = Path(__file__).resolve().parents[2]
OLDEST, NEWEST = "1.27.0", "1.37.0"  # as test_render.py: the Kubernetes versions we support


def _cluster(
    reports: dict[str, Any] | None = None, *, name: str = "ops", ns: str = "team-a", **spec: Any
) -> RocketCluster:
    data = load_manifest(REPO / "examples" / "health-reports.yaml").model_dump(
        mode="json", by_alias=True
    )
    data["metadata"] = {"name": name, "namespace": ns, "uid": "u-1"}
    if reports is not None:
        data["spec"]["healthReports"] = reports
    data["spec"].update(spec)
    return RocketCluster.model_validate(data)


def _plain(**spec: Any) -> RocketCluster:
    """The example without healthReports."""
    data = _cluster().model_dump(mode="json", by_alias=True)
    data["spec"].pop("healthReports")
    data["spec"].update(spec)
    return RocketCluster.model_validate(data)


def _reports(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["metadata"]["labels"][kube.LABEL_COMPONENT] == health_reports.COMPONENT
    ]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _pod(cron_job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def _arg(args: list[str], flag: str) -> list[str]:
    """Every value given to ``flag``."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def test_nothing_is_rendered_without_health_reports() -> None:
    assert _reports(render_cluster(_plain())) == []
    kinds = [o["kind"] for o in _reports(render_cluster(_cluster()))]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "CronJob"]


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize(
    "reports",
    [
        {},
        {"output": "shared-reports", "timeZone": "Europe/Berlin", "suspend": True},
        {"image": "registry.example/spark:1", "resources": {}, "prices": None},
    ],
    ids=["defaults", "own-claim", "own-image"],
)
def test_every_object_is_valid_kubernetes(reports: dict[str, Any], version: str) -> None:
    objects = _reports(render_cluster(_cluster(reports)))
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_cron_job_never_overlaps_retries_little_and_stops_a_hung_run() -> None:
    cron_job = _one(render_cluster(_cluster()), "CronJob")
    assert cron_job["metadata"]["name"] == "ops-health-report"
    assert cron_job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    spec = cron_job["spec"]
    assert spec["schedule"] == "15 */6 * * *" and spec["timeZone"] == "Etc/UTC"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0 and spec["suspend"] is False
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] <= 2 and job["activeDeadlineSeconds"] == 3600
    assert _pod(cron_job)["restartPolicy"] == "Never"


def test_the_pod_is_unprivileged_and_reads_only_what_it_mounts() -> None:
    pod = _pod(_one(render_cluster(_cluster()), "CronJob"))
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]]["emptyDir"]["sizeLimit"]
    assert volumes[mounts["/reports"]]["persistentVolumeClaim"] == {
        "claimName": "ops-health-reports"
    }
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "2Gi"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == health_reports.IMAGE_PYTHON


def test_spark_submit_runs_the_entry_point_in_local_mode_against_the_controllers() -> None:
    objects = render_cluster(_cluster())
    (container,) = _pod(_one(objects, "CronJob"))["containers"]
    assert container["command"] == ["spark-submit"]
    args = container["args"]
    entry = args.index(health_reports.ENTRY_POINT)
    submit, job = args[:entry], args[entry + 1 :]
    assert _arg(submit, "--master") == ["local[2]"]
    assert _arg(submit, "--driver-memory") == ["1g"]
    assert "spark.ui.enabled=false" in _arg(submit, "--conf")
    # The entry point leaves the master to spark-submit and reads every controller
    # member through the Service the operator renders for it.
    assert _arg(job, "--master") == ["none"]
    assert _arg(job, "--cluster") == ["ops"]
    services = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Service"
        and o["metadata"]["labels"][kube.LABEL_COMPONENT] == kube.COMPONENT_CONTROLLER
    ]
    assert _arg(job, "--controller") == [
        f"http://{name}.team-a.svc.cluster.local:8080" for name in services
    ]
    assert len(services) == 3
    assert _arg(job, "--jobs") == ["lag,sss-history,tiering"]
    assert _arg(job, "--history-hours") == ["48"]
    assert _arg(job, "--out") == ["/reports"]
    assert _arg(job, "--config") == ["/etc/rocketcluster/jobs.yaml"]


def test_the_price_table_is_a_small_jobs_config_document() -> None:
    objects = _reports(render_cluster(_cluster()))
    config_map = _one(objects, "ConfigMap")
    assert config_map["metadata"]["name"] == "ops-health-report-config"
    document = yaml.safe_load(config_map["data"]["jobs.yaml"])
    assert document == {"prices": {"localGbMonth": 0.10, "objectGbMonth": 0.023}}
    pod = _pod(_one(objects, "CronJob"))
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == kube.CONFIG_DIR]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"] == {"name": "ops-health-report-config"}


def test_without_prices_the_jobs_use_their_own_table() -> None:
    objects = _reports(render_cluster(_cluster({"jobs": ["lag"]})))
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "CronJob"]
    (container,) = _pod(_one(objects, "CronJob"))["containers"]
    assert "--config" not in container["args"]
    assert _arg(container["args"], "--jobs") == ["lag"]
    assert kube.CONFIG_DIR not in {m["mountPath"] for m in container["volumeMounts"]}


def test_an_existing_claim_is_used_as_it_is() -> None:
    objects = _reports(render_cluster(_cluster({"output": "team-reports"})))
    assert "PersistentVolumeClaim" not in [o["kind"] for o in objects]
    pod = _pod(_one(objects, "CronJob"))
    (reports,) = [v for v in pod["volumes"] if v["name"] == "reports"]
    assert reports["persistentVolumeClaim"] == {"claimName": "team-reports"}


def test_the_reports_volume_follows_its_retention_and_storage_class() -> None:
    kept = _one(_reports(render_cluster(_cluster({}))), "PersistentVolumeClaim")
    assert kept["metadata"]["name"] == "ops-health-reports"
    assert "ownerReferences" not in kept["metadata"]
    assert kept["spec"]["resources"]["requests"]["storage"] == "5Gi"
    storage = {"size": "20Gi", "storageClassName": "fast", "whenDeleted": "Delete"}
    owned = _one(_reports(render_cluster(_cluster({"storage": storage}))), "PersistentVolumeClaim")
    assert owned["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert owned["spec"]["storageClassName"] == "fast"
    assert owned["spec"]["resources"]["requests"]["storage"] == "20Gi"


def test_the_image_is_the_spark_jobs_twin_of_the_brokers_unless_given() -> None:
    def image(cluster: RocketCluster) -> str:
        (container,) = _pod(_one(render_cluster(cluster), "CronJob"))["containers"]
        return str(container["image"])

    release = "registry.example/rc/rocketcluster-broker:0.3.1"
    twin = "registry.example/rc/rocketcluster-spark-jobs:0.3.1"
    assert image(_cluster({}, image=release)) == twin
    assert image(_cluster({"image": "spark:2"}, image="acme/broker:9")) == "spark:2"
    with pytest.raises(ValidationError, match=r"healthReports\.image is needed"):
        _cluster({}, image="acme/broker:9")
    with pytest.raises(ValidationError, match="through its controllers"):
        _cluster({}, controller={"replicas": 0}, brokers={"groups": 1, "replicas": 1})


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * MON-FRI", "@daily", "0 0 1,15 * ?"])
def test_cron_schedules_are_accepted(schedule: str) -> None:
    cron_job = _one(render_cluster(_cluster({"schedule": schedule})), "CronJob")
    assert cron_job["spec"]["schedule"] == schedule


@pytest.mark.parametrize("schedule", ["* * * *", "0 * * * * *", "every hour", "TZ=UTC 0 * * * *"])
def test_schedules_that_are_not_five_cron_fields_are_refused(schedule: str) -> None:
    with pytest.raises(ValidationError, match="schedule"):
        _cluster({"schedule": schedule})


def test_jobs_are_named_once_each() -> None:
    with pytest.raises(ValidationError, match="lag twice"):
        _cluster({"jobs": ["lag", "lag"]})
    with pytest.raises(ValidationError, match="jobs"):
        _cluster({"jobs": []})


def test_a_long_cluster_name_still_makes_a_valid_cron_job_name() -> None:
    """A CronJob's name may be 52 characters long (its Jobs add 11); cluster names
    may be 40."""
    long_a, long_b = "a" * 30 + "-reporting", "a" * 30 + "-reportinh"
    names = {
        health_reports.cron_job_name(_cluster({}, name=n))
        for n in (long_a, long_b, "x" * 38, "x" * 39)
    }
    assert len(names) == 4
    assert all(len(n) <= 52 and n.endswith("-health-report") for n in names)
    assert health_reports.cron_job_name(_cluster({}, name="x" * 38)) == "x" * 38 + "-health-report"


def test_the_cron_job_comes_after_what_it_reads() -> None:
    kinds = [o["kind"] for o in render_cluster(_cluster())]
    assert kinds.index("CronJob") > kinds.index("Deployment")
    assert kinds.index("CronJob") > kinds.index("PersistentVolumeClaim")


# -- removal, against the API emulator --------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        for key, kind in (
            ("v1/configmaps", "ConfigMap"),
            ("v1/persistentvolumeclaims", "PersistentVolumeClaim"),
            ("batch/v1/cronjobs", "CronJob"),
            # The Spark driver's account (spark.mode kubernetes, sparkOperator); the
            # Spark Operator's kind is not served here (its CRD is not installed).
            ("v1/serviceaccounts", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1/roles", "Role"),
            ("rbac.authorization.k8s.io/v1/rolebindings", "RoleBinding"),
            # What the reconciler's prune lists for the other parts (the console).
            ("v1/services", "Service"),
            ("apps/v1/deployments", "Deployment"),
            ("networking.k8s.io/v1/ingresses", "Ingress"),
            ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
        ):
            api.resources[key] = kmock.ResourceInfo(kind=kind, verbs=verbs, namespaced=True)
        async with KubeClient(Connection(server=str(api.url).rstrip("/"))) as kube_client:
            yield kube_client


async def _names(client: KubeClient, api_version: str, kind: str) -> set[str]:
    return {i["metadata"]["name"] for i in await client.list(api_version, kind, "team-a", {})}


async def _apply_all(client: KubeClient, objects: list[dict[str, Any]]) -> None:
    applier = MergePatchApplier(client)
    for obj in objects:
        if obj["kind"] in ("ConfigMap", "PersistentVolumeClaim", "CronJob"):
            await applier.apply(obj)


async def test_removing_health_reports_removes_the_schedule_and_keeps_the_reports(
    client: KubeClient,
) -> None:
    await _apply_all(client, render_cluster(_cluster()))
    await _apply_all(client, _reports(render_cluster(_cluster(name="other"))))
    assert await _names(client, "batch/v1", "CronJob") == {
        "ops-health-report",
        "other-health-report",
    }
    # The price table goes when prices do; the CronJob stays.
    without_prices = _reports(render_cluster(_cluster({"prices": None})))
    removed = await prune.prune(client, _cluster(), prune.HEALTH_REPORTS, without_prices)
    assert removed == [("v1", "ConfigMap", "ops-health-report-config")]
    # healthReports gone: the CronJob goes; the reports' volume, the brokers' and
    # controllers' configuration and the other cluster's reports stay.
    removed = await prune.prune(client, _plain(), prune.HEALTH_REPORTS, [])
    assert removed == [("batch/v1", "CronJob", "ops-health-report")]
    assert await _names(client, "batch/v1", "CronJob") == {"other-health-report"}
    assert "ops-health-reports" in await _names(client, "v1", "PersistentVolumeClaim")
    config_maps = await _names(client, "v1", "ConfigMap")
    assert {"ops-controller-config", "ops-broker-0-config", "other-health-report-config"} <= (
        config_maps
    )
    assert await prune.prune(client, _plain(), prune.HEALTH_REPORTS, []) == []


async def test_the_reconciler_prunes_when_health_reports_go(client: KubeClient) -> None:
    events: list[tuple[str, str, str]] = []
    async with httpx.AsyncClient() as http:
        applier = MergePatchApplier(client)
        reconciler = ClusterReconciler(client, applier, http, lambda *e: events.append(e))
        memory = ClusterMemory()
        with_reports = render_cluster(_cluster())
        await _apply_all(client, with_reports)
        await reconciler._prune(_cluster(), with_reports, memory)
        assert events == []
        await reconciler._prune(_plain(), render_cluster(_plain()), memory)
    assert sorted(events) == [
        ("Normal", "HealthReportRemoved", "ConfigMap/ops-health-report-config"),
        ("Normal", "HealthReportRemoved", "CronJob/ops-health-report"),
    ]
    assert await _names(client, "batch/v1", "CronJob") == set()
