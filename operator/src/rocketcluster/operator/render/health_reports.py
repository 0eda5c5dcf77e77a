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

``spark.mode`` chooses the engine; the entry point and its arguments stay the same
(``--master none``: spark-submit chooses), and in every distributed mode the
executors write Parquet under ``/reports`` themselves, so they mount the reports'
volume at the same path:

- ``local``: the above, one JVM in the CronJob's pod;
- ``kubernetes``: the CronJob's pod is the driver in client mode
  (``--master k8s://https://kubernetes.default.svc``); Spark creates executor pods of
  the same image from a pod template (ConfigMap ``<cluster>-health-report-executor``,
  mounted in the driver: the operator's pod security, the component labels the
  NetworkPolicies admit to the admin ports, the launcher
  ``rocketcluster.jobs.k8s_executor`` as command, since the image has no Spark
  entrypoint). The executors reach the driver through a headless Service
  ``<cluster>-health-report-driver`` selecting the running driver pod (fixed driver
  and block manager ports). The driver runs as ServiceAccount
  ``<cluster>-health-report`` with a Role holding exactly what Spark's client mode
  calls (:data:`DRIVER_RULES`); the executors are owned by the driver pod, and the
  reconciler deletes those a failed run left (:func:`orphaned_executors`);
- ``sparkOperator``: a ScheduledSparkApplication (Kubeflow Spark Operator) in place of
  the CronJob, applied only where its CRD is served (the reconciler asks the API's
  discovery; otherwise a Warning condition says to install the operator);
- ``standalone``: the CronJob's pod is the driver in client mode against
  ``spark.master``; the workers must mount the same reports storage at /reports and
  run the jobs' image (its Python).
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
    SparkMode,
)
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.controllers import admin_urls
from rocketcluster.operator.render.meta import (
    K8sObject,
    component_selector,
    labels,
    metadata,
    selector_labels,
    tokenless_service_account,
)

COMPONENT: Final = "health-report"
# What the reconciler lists to find objects no longer rendered. Not the claim: the
# reports outlive the schedule that wrote them.
SPARK_OPERATOR_API: Final = "sparkoperator.k8s.io/v1beta2"
SCHEDULED_SPARK_APPLICATION: Final = "ScheduledSparkApplication"
SPARK_OPERATOR_CRD: Final = "scheduledsparkapplications.sparkoperator.k8s.io"
KINDS: Final = (
    ("v1", "ConfigMap"),
    ("batch/v1", "CronJob"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    (SPARK_OPERATOR_API, SCHEDULED_SPARK_APPLICATION),
)

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

# -- the distributed modes --------------------------------------------------------------
# The Spark the image holds (rocketcluster-jobs' locked PySpark): the
# ScheduledSparkApplication names it; a test checks it against the workspace's lock.
SPARK_VERSION: Final = "4.3.0"
K8S_MASTER: Final = "k8s://https://kubernetes.default.svc"
# Fixed driver ports, for the headless Service the executors reach the driver by.
DRIVER_PORT: Final = 7078
DRIVER_BLOCK_MANAGER_PORT: Final = 7079
# The label Spark gives its own pods (spark-role: executor); the operator gives it to
# the driver pod, which the driver's Service selects.
SPARK_ROLE_LABEL: Final = "spark-role"
DRIVER_ROLE: Final = "driver"
EXECUTOR_ROLE: Final = "executor"
# The executor pod template, mounted in the driver.
TEMPLATE_DIR: Final = "/etc/rocketcluster-spark"
TEMPLATE_FILE: Final = "executor-pod.yaml"
EXECUTOR_CONTAINER: Final = "executor"
# Spark's containers on Kubernetes start with args ["executor"] (or ["driver", ...])
# and rely on an entrypoint the image does not have: this module is it.
LAUNCHER: Final = (IMAGE_PYTHON, "-m", "rocketcluster.jobs.k8s_executor")
# What a driver in client mode (kubernetes) or cluster mode (sparkOperator) calls,
# read from Spark's resource-managers/kubernetes/core with the confs rendered below
# (executor ConfigMap off, no driver-owned claims, no driver Service of Spark's):
# operator/tests/test_render_health_reports.py says why each verb.
DRIVER_RULES: Final[tuple[dict[str, Any], ...]] = (
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"],
    },
)
# Spark confs that keep the driver within DRIVER_RULES.
DRIVER_RBAC_CONFS: Final = (
    ("spark.kubernetes.executor.disableConfigMap", "true"),
    ("spark.kubernetes.driver.ownPersistentVolumeClaim", "false"),
    ("spark.kubernetes.driver.reusePersistentVolumeClaim", "false"),
    ("spark.kubernetes.driver.service.deleteOnTermination", "false"),
)


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


def service_account_name(cluster: RocketCluster) -> str:
    """The Spark driver's ServiceAccount (and its Role and RoleBinding)."""
    return f"{cluster.name}-health-report"


def driver_service_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-health-report-driver"


def executor_template_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-health-report-executor"


def mode(cluster: RocketCluster) -> SparkMode:
    return _spec(cluster).spark.mode


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


def master(cluster: RocketCluster) -> str:
    """What spark-submit is given as ``--master`` in the CronJob's pod."""
    spark = _spec(cluster).spark
    if spark.mode is SparkMode.KUBERNETES:
        return K8S_MASTER
    if spark.mode is SparkMode.STANDALONE:
        return spark.master
    return SPARK_MASTER


def executor_confs(cluster: RocketCluster) -> dict[str, str]:
    """The executors' size and the shuffle's width, in every distributed mode."""
    spark = _spec(cluster).spark
    confs = {
        "spark.executor.cores": str(spark.executor_cores),
        "spark.executor.memory": spark.executor_memory,
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}",
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions()),
    }
    if spark.executor_memory_overhead:
        confs["spark.executor.memoryOverhead"] = spark.executor_memory_overhead
    return confs


def _client_mode_confs() -> dict[str, str]:
    """A driver in the CronJob's pod that executors elsewhere connect to: it listens
    on every address, on fixed ports."""
    return {
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(DRIVER_BLOCK_MANAGER_PORT),
    }


def kubernetes_confs(cluster: RocketCluster) -> dict[str, str]:
    """Spark on Kubernetes, client mode: the executors Spark creates, and what keeps
    the driver within :data:`DRIVER_RULES`."""
    spark = _spec(cluster).spark
    ns = cluster.metadata.namespace
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.reports"
    return {
        **_client_mode_confs(),
        "spark.driver.host": kube.service_host(driver_service_name(cluster), ns),
        "spark.kubernetes.namespace": ns,
        # The pod the executors are owned by (garbage-collected with it).
        "spark.kubernetes.driver.pod.name": f"$({kube.ENV_POD_NAME})",
        "spark.kubernetes.container.image": cluster.spec.health_reports_image(),
        "spark.kubernetes.container.image.pullPolicy": cluster.spec.image_pull_policy.value,
        "spark.kubernetes.executor.podNamePrefix": cron_job_name(cluster),
        "spark.kubernetes.executor.podTemplateFile": f"{TEMPLATE_DIR}/{TEMPLATE_FILE}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        f"{volume}.options.claimName": claim_name(cluster),
        f"{volume}.mount.path": REPORTS_DIR,
        "spark.executor.instances": str(spark.executors),
        **executor_confs(cluster),
        **dict(DRIVER_RBAC_CONFS),
    }


def standalone_confs(cluster: RocketCluster) -> dict[str, str]:
    """Client mode against the user's standalone master: the executors' total cores
    (spark.cores.max) make the count; their environment is handed over by Spark."""
    spark = _spec(cluster).spark
    confs = {
        **_client_mode_confs(),
        "spark.driver.host": f"$({kube.ENV_POD_IP})",
        "spark.cores.max": str(spark.executors * spark.executor_cores),
        **executor_confs(cluster),
        "spark.executorEnv.PYSPARK_PYTHON": IMAGE_PYTHON,
        "spark.executorEnv.HOME": "/tmp",
    }
    if auth.enabled(cluster):  # the driver's own copy, expanded by the kubelet
        confs[f"spark.executorEnv.{ADMIN_TOKEN_ENV}"] = f"$({ADMIN_TOKEN_ENV})"
    if tls.enabled(cluster):  # the workers hold the cluster's CA at the same path
        confs["spark.executorEnv.SSL_CERT_FILE"] = f"{tls.TLS_DIR}/{tls.CA_KEY}"
    return confs


def submit_confs(cluster: RocketCluster) -> dict[str, str]:
    """The ``--conf`` pairs beyond the UI's: none in local mode."""
    spark = _spec(cluster).spark
    if spark.mode is SparkMode.KUBERNETES:
        return kubernetes_confs(cluster)
    if spark.mode is SparkMode.STANDALONE:
        return standalone_confs(cluster)
    return {}


def spark_submit_args(cluster: RocketCluster) -> list[str]:
    """``spark-submit`` on the entry point's file: in local mode one JVM in the pod
    (the driver, two task threads); in kubernetes and standalone modes the driver, in
    client mode, of executors elsewhere. The UI is off."""
    reports = _spec(cluster)
    deploy = ["--deploy-mode", "client"] if reports.spark.distributed() else []
    confs = [arg for k, v in submit_confs(cluster).items() for arg in ("--conf", f"{k}={v}")]
    return [
        "--master",
        master(cluster),
        *deploy,
        "--driver-memory",
        reports.driver_memory,
        "--conf",
        "spark.ui.enabled=false",
        *confs,
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
    # Executor pods on other nodes write the reports too (kubernetes, sparkOperator).
    shared = reports.spark.mode in (SparkMode.KUBERNETES, SparkMode.SPARK_OPERATOR)
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany" if shared else "ReadWriteOnce"],
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


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _driver_env(cluster: RocketCluster) -> list[dict[str, Any]]:
    """Where the driver's JVM binds: loopback only in local mode; else the pod's own
    address (the image's SPARK_LOCAL_IP says loopback), with the pod's name
    (kubernetes: the executors' owner) or address (standalone: spark.driver.host)."""
    spark_mode = mode(cluster)
    if spark_mode is SparkMode.LOCAL:
        return [{"name": "SPARK_LOCAL_IP", "value": "127.0.0.1"}]
    env = [_field_env("SPARK_LOCAL_IP", "status.podIP")]
    if spark_mode is SparkMode.KUBERNETES:
        env.append(_field_env(kube.ENV_POD_NAME, "metadata.name"))
    else:
        env.append(_field_env(kube.ENV_POD_IP, "status.podIP"))
    return env


def _jobs_env(cluster: RocketCluster) -> list[dict[str, Any]]:
    """What the jobs need wherever they run (driver and executors): the image's
    Python for the workers, a writable HOME, the admin token and, with TLS, the CA."""
    env = [
        # Python workers on the image's own interpreter (the same pyarrow, pandas).
        {"name": "PYSPARK_PYTHON", "value": IMAGE_PYTHON},
        {"name": "PYSPARK_DRIVER_PYTHON", "value": IMAGE_PYTHON},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
        *_token_env(cluster),
    ]
    if tls.enabled(cluster):
        # The jobs' HTTP client (httpx) trusts SSL_CERT_FILE: the cluster's CA only.
        env.append({"name": "SSL_CERT_FILE", "value": f"{tls.TLS_DIR}/{tls.CA_KEY}"})
    return env


def _jobs_mounts(cluster: RocketCluster, *, driver: bool = True) -> list[dict[str, Any]]:
    """The driver's mounts; an executor's lack the price table (the driver reads it)
    and the reports' volume (Spark mounts it: spark.kubernetes.executor.volumes)."""
    mounts: list[dict[str, Any]] = []
    if driver:
        mounts.append({"name": "reports", "mountPath": REPORTS_DIR})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    if driver and _spec(cluster).prices is not None:
        mounts.append({"name": "config", "mountPath": kube.CONFIG_DIR, "readOnly": True})
    if tls.enabled(cluster):
        mounts.append({"name": tls.VOLUME, "mountPath": tls.TLS_DIR, "readOnly": True})
    return mounts


def _container(cluster: RocketCluster) -> dict[str, Any]:
    reports = _spec(cluster)
    mounts = _jobs_mounts(cluster)
    if mode(cluster) is SparkMode.KUBERNETES:
        mounts.append({"name": "executor-template", "mountPath": TEMPLATE_DIR, "readOnly": True})
    out: dict[str, Any] = {
        "name": "health-report",
        "image": cluster.spec.health_reports_image(),
        "imagePullPolicy": cluster.spec.image_pull_policy.value,
        "command": ["spark-submit"],
        "args": spark_submit_args(cluster),
        "env": [*_driver_env(cluster), *_jobs_env(cluster)],
        "volumeMounts": mounts,
        "securityContext": pods.container_security(),
    }
    if reports.spark.mode in (SparkMode.KUBERNETES, SparkMode.STANDALONE):
        out["ports"] = _driver_ports()
    limits = pods.resources(reports.resources)
    if limits:
        out["resources"] = limits
    return out


def _driver_ports() -> list[dict[str, Any]]:
    return [
        {"name": "driver-rpc", "containerPort": DRIVER_PORT, "protocol": "TCP"},
        {"name": "blockmanager", "containerPort": DRIVER_BLOCK_MANAGER_PORT, "protocol": "TCP"},
    ]


def _token_env(cluster: RocketCluster) -> list[dict[str, Any]]:
    """security.auth: the admin token the job's cluster reader sends (jobs/source.py)."""
    if not auth.enabled(cluster):
        return []
    ref = {"name": auth.token_secret(cluster), "key": ADMIN_TOKEN_KEY}
    return [{"name": ADMIN_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}}]


def _volumes(cluster: RocketCluster, *, driver: bool = True) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    if driver:
        claim = {"claimName": claim_name(cluster)}
        volumes.append({"name": "reports", "persistentVolumeClaim": claim})
    volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": SCRATCH_SIZE}})
    if driver and _spec(cluster).prices is not None:
        volumes.append({"name": "config", "configMap": {"name": config_map_name(cluster)}})
    if tls.enabled(cluster):  # ca.crt alone: the jobs present no certificate
        secret = {"secretName": tls.secret_name(cluster), "items": [tls.ca_item()]}
        volumes.append({"name": tls.VOLUME, "secret": secret})
    if driver and mode(cluster) is SparkMode.KUBERNETES:
        template = {"name": executor_template_name(cluster)}
        volumes.append({"name": "executor-template", "configMap": template})
    return volumes


def cron_job(cluster: RocketCluster) -> K8sObject:
    reports = _spec(cluster)
    on_kubernetes = reports.spark.mode is SparkMode.KUBERNETES
    pod_labels = labels(cluster, COMPONENT)
    if on_kubernetes:  # what the driver's Service selects (executors say executor)
        pod_labels[SPARK_ROLE_LABEL] = DRIVER_ROLE
    account: dict[str, Any] = (
        # The driver creates its executor pods through the Kubernetes API.
        {"serviceAccountName": service_account_name(cluster), "automountServiceAccountToken": True}
        if on_kubernetes
        # The jobs read the cluster over HTTP, never the Kubernetes API.
        else {"automountServiceAccountToken": False}
    )
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        **account,
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


# -- kubernetes and sparkOperator: the driver's account, Service, executor template ---


def service_account(cluster: RocketCluster) -> K8sObject:
    """Only the driver pod mounts a token (automountServiceAccountToken on the pod)."""
    return tokenless_service_account(cluster, service_account_name(cluster), COMPONENT)


def driver_role(cluster: RocketCluster) -> K8sObject:
    """Exactly what the Spark driver calls (:data:`DRIVER_RULES`), in this namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(cluster, service_account_name(cluster), COMPONENT),
        "rules": [dict(rule) for rule in DRIVER_RULES],
    }


def driver_role_binding(cluster: RocketCluster) -> K8sObject:
    name = service_account_name(cluster)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(cluster, name, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": name, "namespace": cluster.metadata.namespace}
        ],
    }


def driver_service(cluster: RocketCluster) -> K8sObject:
    """Headless: the executors resolve the running driver pod's own address (a run's
    pod is the only one with the driver's labels: runs never overlap)."""
    selector = {**selector_labels(cluster, COMPONENT), SPARK_ROLE_LABEL: DRIVER_ROLE}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, driver_service_name(cluster), COMPONENT),
        "spec": {
            "clusterIP": "None",
            # The driver has no readiness probe: its address is published as it starts.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["containerPort"]}
                for p in _driver_ports()
            ],
        },
    }


def executor_pod_template(cluster: RocketCluster) -> dict[str, Any]:
    """The pod Spark starts each executor from (it adds the driver's address, the
    executor's id, cores and memory, the image, the reports' volume and its own
    labels): the operator's pod security, the component labels the NetworkPolicies
    admit to the admin ports as they admit the report's pod, no API token."""
    container: dict[str, Any] = {
        "name": EXECUTOR_CONTAINER,
        "command": list(LAUNCHER),
        "env": [
            # The executor's JVM listens on the pod's address (the image says loopback).
            _field_env("SPARK_LOCAL_IP", "status.podIP"),
            *_jobs_env(cluster),
        ],
        "volumeMounts": _jobs_mounts(cluster, driver=False),
        "securityContext": pods.container_security(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": labels(cluster, COMPONENT)},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30,
            "securityContext": pods.pod_security(),
            **pods.placement_fields(cluster.spec.placement),
            "containers": [container],
            "volumes": _volumes(cluster, driver=False),
        },
    }


def executor_template_config_map(cluster: RocketCluster) -> K8sObject:
    document = yaml.safe_dump(executor_pod_template(cluster), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, executor_template_name(cluster), COMPONENT),
        "data": {TEMPLATE_FILE: document},
    }


# -- sparkOperator ------------------------------------------------------------------------


def _spark_operator_pod(cluster: RocketCluster, role: str, *, driver: bool) -> dict[str, Any]:
    """The driver's or executors' part of the SparkApplication template: the same
    environment, mounts and pod security as the CronJob's pod, and the launcher as
    the container's command (the image has no Spark entrypoint)."""
    mounts = _jobs_mounts(cluster, driver=driver)
    if not driver:
        mounts.insert(0, {"name": "reports", "mountPath": REPORTS_DIR})
    pod_labels = labels(cluster, COMPONENT)
    # The driver's account: its Role lets it create its executors (which need none).
    account = {"serviceAccount": service_account_name(cluster)} if driver else {}
    return {
        "labels": pod_labels,
        **account,
        # Spark's JVMs listen on the pod's address (the image says loopback).
        "env": [_field_env("SPARK_LOCAL_IP", "status.podIP"), *_jobs_env(cluster)],
        "volumeMounts": mounts,
        "podSecurityContext": pods.pod_security(),
        "securityContext": pods.container_security(),
        "template": {
            "metadata": {"labels": dict(pod_labels)},
            "spec": {
                "automountServiceAccountToken": driver,
                "enableServiceLinks": False,
                **pods.placement_fields(cluster.spec.placement),
                "containers": [{"name": f"spark-kubernetes-{role}", "command": list(LAUNCHER)}],
            },
        },
    }


def scheduled_spark_application(cluster: RocketCluster) -> K8sObject:
    """The Kubeflow Spark Operator's ScheduledSparkApplication: the same schedule,
    entry point and arguments; the operator's driver (cluster mode) under the
    ServiceAccount whose Role holds :data:`DRIVER_RULES`."""
    reports = _spec(cluster)
    spark = reports.spark
    spark_conf = {
        "spark.ui.enabled": "false",
        **executor_confs(cluster),
        "spark.driver.extraJavaOptions": " ".join(
            (f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}", *SPARK_DRIVER_JVM_OPTIONS)
        ),
        **dict(DRIVER_RBAC_CONFS),
    }
    # The Spark Operator sets the executors' cores and memory from their own fields.
    for key in ("spark.executor.cores", "spark.executor.memory", "spark.executor.memoryOverhead"):
        spark_conf.pop(key, None)
    driver = {
        "cores": 1,
        "memory": reports.driver_memory,
        **_spark_operator_pod(cluster, "driver", driver=True),
    }
    executor: dict[str, Any] = {
        "instances": spark.executors,
        "cores": spark.executor_cores,
        "memory": spark.executor_memory,
        "deleteOnTermination": True,
        **_spark_operator_pod(cluster, "executor", driver=False),
    }
    if spark.executor_memory_overhead:
        executor["memoryOverhead"] = spark.executor_memory_overhead
    template: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": cluster.spec.health_reports_image(),
        "imagePullPolicy": cluster.spec.image_pull_policy.value,
        "mainApplicationFile": f"local://{ENTRY_POINT}",
        "arguments": entry_point_args(cluster),
        "sparkVersion": SPARK_VERSION,
        "sparkConf": spark_conf,
        # A failed run is tried once more, as the CronJob's Job does.
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": BACKOFF_LIMIT,
            "onFailureRetryInterval": 60,
            "onSubmissionFailureRetries": BACKOFF_LIMIT,
            "onSubmissionFailureRetryInterval": 60,
        },
        "volumes": _volumes(cluster, driver=True),
        "driver": driver,
        "executor": executor,
    }
    spec: dict[str, Any] = {
        "schedule": reports.schedule,
        "concurrencyPolicy": "Forbid",
        "suspend": reports.suspend,
        "successfulRunHistoryLimit": reports.successful_jobs_history_limit,
        "failedRunHistoryLimit": reports.failed_jobs_history_limit,
        "template": template,
    }
    if reports.time_zone:
        spec["timeZone"] = reports.time_zone
    return {
        "apiVersion": SPARK_OPERATOR_API,
        "kind": SCHEDULED_SPARK_APPLICATION,
        "metadata": metadata(cluster, cron_job_name(cluster), COMPONENT),
        "spec": spec,
    }


def render(cluster: RocketCluster) -> list[K8sObject]:
    """Nothing without ``spec.healthReports``; else its ConfigMap (with prices), claim
    (without output) and CronJob — or, with executor pods, the driver's account, and
    in kubernetes mode its Service and executor template; in sparkOperator mode a
    ScheduledSparkApplication in place of the CronJob."""
    if cluster.spec.health_reports is None:
        return []
    spark_mode = mode(cluster)
    optional = [config_map(cluster), claim(cluster)]
    objects = [o for o in optional if o is not None]
    if spark_mode in (SparkMode.KUBERNETES, SparkMode.SPARK_OPERATOR):
        objects += [service_account(cluster), driver_role(cluster), driver_role_binding(cluster)]
    if spark_mode is SparkMode.KUBERNETES:
        objects += [driver_service(cluster), executor_template_config_map(cluster)]
    if spark_mode is SparkMode.SPARK_OPERATOR:
        return [*objects, scheduled_spark_application(cluster)]
    return [*objects, cron_job(cluster)]


# -- clean-up after a failed run (kubernetes) ---------------------------------------------


def pod_selector(cluster: RocketCluster) -> dict[str, str]:
    """The labels the driver and executor pods of ``cluster``'s reports carry."""
    return selector_labels(cluster, COMPONENT)


def orphaned_executors(pods: list[dict[str, Any]]) -> list[str]:
    """The executor pods (``spark-role: executor``) among ``pods`` (one cluster's
    health report pods) whose driver — the pod they are owned by — is gone or no longer
    Running: a run that failed or was stopped (activeDeadlineSeconds) may leave them
    until its Job is deleted. An executor with no driver pod as owner is left alone
    (it is no run of ours)."""
    running = {
        p["metadata"]["name"]
        for p in pods
        if _role(p) == DRIVER_ROLE
        and (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }
    orphans = []
    for pod in pods:
        if _role(pod) != EXECUTOR_ROLE or pod["metadata"].get("deletionTimestamp"):
            continue
        owners = [
            o["name"]
            for o in pod["metadata"].get("ownerReferences") or []
            if o.get("kind") == "Pod" and o.get("apiVersion") == "v1"
        ]
        if owners and not any(owner in running for owner in owners):
            orphans.append(pod["metadata"]["name"])
    return sorted(orphans)


def _role(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(SPARK_ROLE_LABEL)
