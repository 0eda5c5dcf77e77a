"""The Spark health reports of a RocketCluster (``spec.healthReports``): one batch/v1
**CronJob** ``<cluster>-health-report`` whose pod runs the jobs' entry point
(``rocketcluster.jobs.run``) with ``spark-submit`` in local mode — driver only, no
executors, nothing reachable from outside the pod — against the controllers' admin
Services, writing each report to a volume:

- ``output`` names an existing PersistentVolumeClaim, or the operator renders one,
  ``<cluster>-health-reports`` (never deleted by the operator: the reports are data;
  owned by the RocketCluster only with ``storage.whenDeleted: Delete``);
- ``prices`` becomes a **ConfigMap** ``<cluster>-health-report-config`` whose one file,
  ``jobs.yaml``, is a small JobsConfig document (``prices: {localGbMonth,
  objectGbMonth}``) given to the entry point as ``--config``.

Runs never overlap (``concurrencyPolicy: Forbid``), a run that hangs is stopped
(``activeDeadlineSeconds``), a failed run is tried once more. Every object carries the
component label ``health-report``: the reconciler deletes the CronJob and ConfigMap
no longer rendered when healthReports goes (:data:`KINDS`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import yaml

from rocketcluster.api import kube
from rocketcluster.api.auth import ADMIN_TOKEN_ENV, ADMIN_TOKEN_KEY
from rocketcluster.api.cluster import (
    SPARK_DRIVER_JVM_OPTIONS,
    ClaimRetention,
    HealthReportsSpec,
    RocketCluster,
)
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.controllers import admin_urls
from rocketcluster.operator.render.meta import K8sObject, component_selector, labels, metadata

COMPONENT: Final = "health-report"
# What the reconciler lists to find objects no longer rendered. Not the claim: the
# reports outlive the schedule that wrote them.
KINDS: Final = (("v1", "ConfigMap"), ("batch/v1", "CronJob"))

# The layout of the rocketcluster-spark-jobs image (images/spark-jobs/Containerfile):
# a virtualenv at /opt/rocketcluster on Debian 12's Python 3.11, spark-submit on PATH.
IMAGE_PYTHON: Final = "/opt/rocketcluster/bin/python"
JOBS_PACKAGE: Final = "/opt/rocketcluster/lib/python3.11/site-packages/rocketcluster/jobs"
ENTRY_POINT: Final = f"{JOBS_PACKAGE}/run.py"
# Spark's own logging at errors only: the JVM reads it at start, before run.py runs.
LOG_CONFIG: Final = f"{JOBS_PACKAGE}/log4j2.properties"
SPARK_MASTER: Final = "local[2]"
REPORTS_DIR: Final = "/reports"
CONFIG_FILE: Final = "jobs.yaml"
# A schedule missed by more than this (the controller manager was down) is skipped;
# the next one runs.
STARTING_DEADLINE_SECONDS: Final = 600
BACKOFF_LIMIT: Final = 1
# Spark spills shuffles and keeps its scratch files in /tmp (spark.local.dir).
SCRATCH_SIZE: Final = "2Gi"
CRON_JOB_SUFFIX: Final = "-health-report"
CRON_JOB_NAME_MAX: Final = 52


def cron_job_name(cluster: RocketCluster) -> str:
    """``<cluster>-health-report``; a cluster name too long for that (a CronJob's name
    may have 52 characters: its Jobs append 11) is cut and made unique by a digest."""
    base = cluster.name
    if len(base) + len(CRON_JOB_SUFFIX) > CRON_JOB_NAME_MAX:
        digest = hashlib.sha256(base.encode()).hexdigest()[:5]
        keep = CRON_JOB_NAME_MAX - len(CRON_JOB_SUFFIX) - len(digest) - 1
        base = f"{base[:keep].rstrip('-')}-{digest}"
    return f"{base}{CRON_JOB_SUFFIX}"


def config_map_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-health-report-config"


def claim_name(cluster: RocketCluster) -> str:
    """The claim the reports go to: ``output``, or the one the operator makes."""
    reports = _spec(cluster)
    return reports.output or f"{cluster.name}-health-reports"


def owner_selector(cluster: RocketCluster) -> dict[str, str]:
    """The labels every health report object of ``cluster`` carries (and only they)."""
    return component_selector(cluster, COMPONENT)


def _spec(cluster: RocketCluster) -> HealthReportsSpec:
    reports = cluster.spec.health_reports
    if reports is None:
        raise ValueError(f"{cluster.name} has no spec.healthReports")
    return reports


def controller_urls(cluster: RocketCluster) -> list[str]:
    """Each controller member's admin endpoint, through its Service: any member
    serves the replicated state the jobs read."""
    return admin_urls(cluster)


def entry_point_args(cluster: RocketCluster) -> list[str]:
    """The arguments of ``rocketcluster.jobs.run`` (after its file): the master left
    to spark-submit, the controllers, the jobs, the window, where to write."""
    reports = _spec(cluster)
    args = ["--master", "none", "--cluster", cluster.name]
    for url in controller_urls(cluster):
        args += ["--controller", url]
    args += ["--jobs", ",".join(reports.jobs)]
    args += ["--history-hours", f"{reports.history_hours:g}"]
    args += ["--out", REPORTS_DIR]
    if reports.prices is not None:
        args += ["--config", f"{kube.CONFIG_DIR}/{CONFIG_FILE}"]
    return args


def spark_submit_args(cluster: RocketCluster) -> list[str]:
    """``spark-submit`` in local mode on the entry point's file: one JVM in the pod
    (the driver, two task threads), its UI off."""
    reports = _spec(cluster)
    return [
        "--master",
        SPARK_MASTER,
        "--driver-memory",
        reports.driver_memory,
        "--conf",
        "spark.ui.enabled=false",
        "--driver-java-options",
        " ".join((f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}", *SPARK_DRIVER_JVM_OPTIONS)),
        "--name",
        f"rocketcluster-health-{cluster.name}",
        ENTRY_POINT,
        *entry_point_args(cluster),
    ]


def config_document(cluster: RocketCluster) -> str | None:
    """The ``--config`` file (a JobsConfig document), or None when the jobs' own
    defaults serve."""
    prices = _spec(cluster).prices
    if prices is None:
        return None
    data = {"prices": prices.model_dump(mode="json", by_alias=True)}
    return yaml.safe_dump(data, sort_keys=False)


def config_map(cluster: RocketCluster) -> K8sObject | None:
    document = config_document(cluster)
    if document is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, config_map_name(cluster), COMPONENT),
        "data": {CONFIG_FILE: document},
    }


def claim(cluster: RocketCluster) -> K8sObject | None:
    """The reports' volume, unless ``output`` names one of the user's."""
    reports = _spec(cluster)
    if reports.output:
        return None
    storage = reports.storage
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(
            cluster,
            claim_name(cluster),
            COMPONENT,
            owned=storage.when_deleted is ClaimRetention.DELETE,
        ),
        "spec": spec,
    }


def _container(cluster: RocketCluster) -> dict[str, Any]:
    reports = _spec(cluster)
    mounts: list[dict[str, Any]] = [
        {"name": "reports", "mountPath": REPORTS_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if reports.prices is not None:
        mounts.append({"name": "config", "mountPath": kube.CONFIG_DIR, "readOnly": True})
    out: dict[str, Any] = {
        "name": "health-report",
        "image": cluster.spec.health_reports_image(),
        "imagePullPolicy": cluster.spec.image_pull_policy.value,
        "command": ["spark-submit"],
        "args": spark_submit_args(cluster),
        "env": [
            # Local mode: the driver binds to loopback only.
            {"name": "SPARK_LOCAL_IP", "value": "127.0.0.1"},
            # Python workers on the image's own interpreter (the same pyarrow, pandas).
            {"name": "PYSPARK_PYTHON", "value": IMAGE_PYTHON},
            {"name": "PYSPARK_DRIVER_PYTHON", "value": IMAGE_PYTHON},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
            *_token_env(cluster),
        ],
        "volumeMounts": mounts,
        "securityContext": pods.container_security(),
    }
    limits = pods.resources(reports.resources)
    if limits:
        out["resources"] = limits
    if tls.enabled(cluster):
        # The jobs' HTTP client (httpx) trusts SSL_CERT_FILE: the cluster's CA only.
        mounts.append({"name": tls.VOLUME, "mountPath": tls.TLS_DIR, "readOnly": True})
        out["env"].append({"name": "SSL_CERT_FILE", "value": f"{tls.TLS_DIR}/{tls.CA_KEY}"})
    return out


def _token_env(cluster: RocketCluster) -> list[dict[str, Any]]:
    """security.auth: the admin token the job's cluster reader sends (jobs/source.py)."""
    if not auth.enabled(cluster):
        return []
    ref = {"name": auth.token_secret(cluster), "key": ADMIN_TOKEN_KEY}
    return [{"name": ADMIN_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}}]


def _volumes(cluster: RocketCluster) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "reports", "persistentVolumeClaim": {"claimName": claim_name(cluster)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
    ]
    if _spec(cluster).prices is not None:
        volumes.append({"name": "config", "configMap": {"name": config_map_name(cluster)}})
    if tls.enabled(cluster):  # ca.crt alone: the jobs present no certificate
        secret = {"secretName": tls.secret_name(cluster), "items": [tls.ca_item()]}
        volumes.append({"name": tls.VOLUME, "secret": secret})
    return volumes


def cron_job(cluster: RocketCluster) -> K8sObject:
    reports = _spec(cluster)
    pod_labels = labels(cluster, COMPONENT)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The jobs read the cluster over HTTP, never the Kubernetes API.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": pods.pod_security(),
        **pods.placement_fields(cluster.spec.placement),
        "containers": [_container(cluster)],
        "volumes": _volumes(cluster),
    }
    spec: dict[str, Any] = {
        "schedule": reports.schedule,
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": STARTING_DEADLINE_SECONDS,
        "suspend": reports.suspend,
        "successfulJobsHistoryLimit": reports.successful_jobs_history_limit,
        "failedJobsHistoryLimit": reports.failed_jobs_history_limit,
        "jobTemplate": {
            "metadata": {"labels": dict(pod_labels)},
            "spec": {
                "backoffLimit": BACKOFF_LIMIT,
                "activeDeadlineSeconds": reports.active_deadline_seconds,
                "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            },
        },
    }
    if reports.time_zone:
        spec["timeZone"] = reports.time_zone
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(cluster, cron_job_name(cluster), COMPONENT),
        "spec": spec,
    }


def render(cluster: RocketCluster) -> list[K8sObject]:
    """Nothing without ``spec.healthReports``; else its ConfigMap (with prices), claim
    (without output) and CronJob."""
    if cluster.spec.health_reports is None:
        return []
    optional = [config_map(cluster), claim(cluster)]
    return [*(o for o in optional if o is not None), cron_job(cluster)]
