"""The RocketCluster custom resource (``rocketcluster.io/v1alpha1``): one pydantic model
is the source of truth for the CRD schema, for ``rocketctl local`` and for the operator.

Field names are snake_case in Python and camelCase in YAML (aliases), as Kubernetes
manifests spell them.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import ConfigDict, Field, JsonValue, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from rocketcluster.api.limits import ClientLimits
from rocketcluster.api.spec_model import LIST_MAP_BY_NAME, Quantity
from rocketcluster.api.spec_model import SpecModel as _Model
from rocketcluster.api.stats import DEFAULT_STATS_INTERVAL_SECONDS
from rocketcluster.api.status import RocketClusterStatus
from rocketcluster.api.tiered_spec import TieredStorageSpec
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.api.users import UserSpec

API_VERSION = "rocketcluster.io/v1alpha1"
KIND = "RocketCluster"


# A broker's front processes (broker/front): a number, or "auto" for the container's CPU.
FrontProcesses = Annotated[int, Field(ge=0, le=64)] | Literal["auto"]


class ResourcesSpec(_Model):
    """Container resources, as in a pod spec (``cpu: 500m``, ``memory: 1Gi``)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class ClaimRetention(StrEnum):
    """What happens to a volume when its pod goes for good (Kubernetes' own terms)."""

    RETAIN = "Retain"
    DELETE = "Delete"


class StorageSpec(_Model):
    size: Quantity = "10Gi"
    storage_class_name: str | None = None
    when_deleted: ClaimRetention = Field(
        default=ClaimRetention.RETAIN,
        description="the volumes when the RocketCluster is deleted: Retain keeps the data",
    )
    when_scaled: ClaimRetention = Field(
        default=ClaimRetention.RETAIN,
        description="the volumes of replicas or groups removed by a scale-in",
    )


class ControllerSpec(_Model):
    replicas: Literal[0, 1, 3, 5] = Field(
        default=3, description="controller members; 0 runs brokers standalone (no controller)"
    )
    image: str = Field(
        default="",
        description=(
            "the controller members' image; empty: derived from spec.image, whose "
            "rocketcluster-broker image is released with a rocketcluster-controller image "
            "of the same tag (any other image is used as it is)"
        ),
    )
    storage: StorageSpec = Field(default_factory=lambda: StorageSpec(size="1Gi"))
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)


class ReplicationMode(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class ReplicationSpec(_Model):
    """How a group replicates (RocketMQ 5 controller mode): sync writes wait for
    ``inSyncReplicas`` acknowledgements; fewer than ``minInSyncReplicas`` in sync refuses
    writes."""

    mode: ReplicationMode = ReplicationMode.SYNC
    in_sync_replicas: int = Field(default=1, ge=1)
    min_in_sync_replicas: int = Field(default=1, ge=1)
    all_ack_in_sync_state_set: bool = False
    unclean_election: bool = False


class FlushPolicy(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class DiskFullPolicy(StrEnum):
    """What a broker does when its disk fills (the store's DiskFullPolicy)."""

    REJECT = "reject"
    DELETE_OLDEST = "deleteOldest"


_BROKER_RULES: JsonValue = [
    {
        "rule": "self.replication.inSyncReplicas <= self.replicas",
        "message": "replication.inSyncReplicas cannot exceed replicas",
    },
    {
        "rule": "self.replication.minInSyncReplicas <= self.replication.inSyncReplicas",
        "message": "replication.minInSyncReplicas cannot exceed inSyncReplicas",
    },
]


class BrokersSpec(_Model):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _BROKER_RULES})

    groups: int = Field(default=1, ge=0, le=64)
    replicas: int = Field(default=1, ge=1, le=7)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    replication: ReplicationSpec = Field(default_factory=ReplicationSpec)
    flush: FlushPolicy = FlushPolicy.ASYNC
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=64 * 1024 * 1024)
    retention_hours: float = Field(default=72.0, gt=0)
    disk_full: DiskFullPolicy = Field(
        default=DiskFullPolicy.REJECT,
        description=(
            "when the disk fills: reject refuses new messages (a TOO_MANY_REQUESTS "
            "'no space left' error) and never deletes, before retentionHours, messages "
            "a consumer group has not consumed — writes resume when space returns; "
            "deleteOldest deletes the oldest messages, consumed or not, to go on "
            "accepting writes (RocketMQ's forcible clean)"
        ),
    )
    auto_create_topics: bool = False
    stats_interval_seconds: float = Field(
        default=DEFAULT_STATS_INTERVAL_SECONDS,
        ge=0,
        le=3600,
        description=(
            "how often each master publishes its stats snapshot to RMQ_SYS_BROKER_STATS, "
            "the history the health reports read (0: never)"
        ),
    )
    termination_grace_period_seconds: int = Field(
        default=60, ge=1, le=3600, description="time a broker gets to flush and stop"
    )
    client_limits: ClientLimits = Field(default_factory=ClientLimits)
    front_processes: FrontProcesses = Field(
        default="auto",
        description=(
            "client-facing processes beside each broker's store process, sharing its "
            "client port: 0 is one process doing everything; auto sizes them to the "
            "container's CPU limit (none below 3 cores)"
        ),
    )

    @model_validator(mode="after")
    def _replication_fits(self) -> Self:
        rep = self.replication
        if rep.in_sync_replicas > self.replicas:
            raise ValueError(
                f"replication.inSyncReplicas ({rep.in_sync_replicas}) exceeds replicas "
                f"({self.replicas})"
            )
        if rep.min_in_sync_replicas > rep.in_sync_replicas:
            raise ValueError("replication.minInSyncReplicas exceeds inSyncReplicas")
        return self


HealthJob = Literal["lag", "sss-history", "tiering"]
ALL_HEALTH_JOBS: tuple[HealthJob, ...] = ("lag", "sss-history", "tiering")
# The health jobs' Spark JVMs (the driver, which in local mode runs every task too, and
# executors): the throughput collector. Until issue 31 they ran on the client compiler
# only (-XX:TieredStopAtLevel=1), which cost nothing at a million snapshot rows; at ten
# million it made the per-queue shuffle and the Parquet writes 2-3x slower (`rocketctl
# bench spark`: a 1e7-row dedup 106 s against 35 s, a write 56 s against 17 s).
SPARK_DRIVER_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseParallelGC",)


class MonitoringSpec(_Model):
    service_monitor: bool = False
    prometheus_rule: bool = False
    grafana_dashboards: bool = False


# Five cron fields (minute hour day-of-month month day-of-week) as a CronJob takes
# them, or one of its macros; no TZ= prefix (that is timeZone).
CRON_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)"
    r"|[0-9A-Za-z*?/,-]+( +[0-9A-Za-z*?/,-]+){4})$"
)


class HealthReportPrices(_Model):
    """Storage prices for the tiering job's projected savings, in one currency per
    GB-month; the jobs' own price table is used when this is not given."""

    local_gb_month: float = Field(ge=0, description="the brokers' local disks, per GB-month")
    object_gb_month: float = Field(
        ge=0, description="the tiered storage backend (object storage), per GB-month"
    )


class HealthReportStorageSpec(_Model):
    """The volume the operator makes for the reports when ``output`` names none."""

    size: Quantity = "5Gi"
    storage_class_name: str | None = None
    when_deleted: ClaimRetention = Field(
        default=ClaimRetention.RETAIN,
        description=(
            "the reports' volume when the RocketCluster is deleted: Retain keeps it (it is "
            "never deleted when healthReports alone is removed)"
        ),
    )


class SparkMode(StrEnum):
    """Where the health reports' Spark executors run (``healthReports.spark.mode``)."""

    LOCAL = "local"
    KUBERNETES = "kubernetes"
    SPARK_OPERATOR = "sparkOperator"
    STANDALONE = "standalone"


# spark://host:port, or several masters (ZooKeeper recovery) as spark://h1:p1,h2:p2.
SPARK_MASTER_PATTERN = (
    r"^(spark://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}"
    r"(,[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5})*)?$"
)
# A JVM size as Spark takes it (spark-submit --driver-memory, spark.executor.memory).
SPARK_MEMORY_PATTERN = r"^[0-9]+[kmgt]?$"
_SPARK_RULES: JsonValue = [
    {
        "rule": "!has(self.mode) || self.mode != 'standalone' "
        "|| (has(self.master) && size(self.master) > 0)",
        "message": "mode standalone needs master: the spark://host:port URL of your Spark master",
    },
    {
        "rule": "(has(self.mode) && self.mode == 'standalone') "
        "|| !has(self.master) || size(self.master) == 0",
        "message": "master is for mode standalone only: local runs in the report's pod, "
        "kubernetes and sparkOperator run executor pods",
    },
]


class HealthReportSparkSpec(_Model):
    """The engine the health reports run on. ``local``: spark-submit in local mode in
    the CronJob's pod (driver and tasks in one JVM, two task threads). ``kubernetes``:
    the CronJob's pod is the driver (client mode) and Spark creates executor pods of
    the same image through the Kubernetes API, under the ServiceAccount
    <cluster>-health-report. ``sparkOperator``: a ScheduledSparkApplication for the
    Kubeflow Spark Operator, which must be installed (the operator says so in the
    status otherwise). ``standalone``: the CronJob's pod is the driver against your
    Spark standalone cluster at ``master``, whose workers must mount the same reports
    storage at /reports. In kubernetes and sparkOperator modes the executors write the
    reports too: the volume the operator makes is ReadWriteMany (its storage class must
    support it), and an ``output`` claim of yours must be ReadWriteMany."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _SPARK_RULES})

    mode: SparkMode = Field(
        default=SparkMode.LOCAL,
        description="local (one pod), kubernetes (executor pods), sparkOperator "
        "(a ScheduledSparkApplication) or standalone (your Spark master)",
    )
    master: str = Field(
        default="",
        max_length=1024,
        pattern=SPARK_MASTER_PATTERN,
        description="mode standalone only, and required there: the master's URL, "
        "spark://host:port (several masters: spark://h1:7077,h2:7077)",
    )
    executors: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="executors per run (kubernetes, sparkOperator; standalone: "
        "spark.cores.max is executors x executorCores); ignored in local mode",
    )
    executor_cores: int = Field(
        default=1, ge=1, le=64, description="task slots (and CPU cores requested) per executor"
    )
    executor_memory: str = Field(
        default="1g",
        pattern=SPARK_MEMORY_PATTERN,
        description="each executor's JVM heap (spark.executor.memory, e.g. 2g)",
    )
    executor_memory_overhead: str | None = Field(
        default=None,
        pattern=SPARK_MEMORY_PATTERN,
        description="memory beyond the heap per executor pod, for the Python workers and "
        "off-heap buffers (spark.executor.memoryOverhead, e.g. 1g); unset: Spark's own "
        "default (a share of executorMemory, at least 384m)",
    )

    @model_validator(mode="after")
    def _master_for_standalone(self) -> Self:
        if self.mode is SparkMode.STANDALONE and not self.master:
            raise ValueError(
                "healthReports.spark.mode standalone needs master: the spark://host:port "
                "URL of your Spark master"
            )
        if self.mode is not SparkMode.STANDALONE and self.master:
            raise ValueError(
                f"healthReports.spark.master is for mode standalone only, not {self.mode.value}"
            )
        return self

    def distributed(self) -> bool:
        return self.mode is not SparkMode.LOCAL

    def shuffle_partitions(self) -> int:
        """What the distributed modes give spark.sql.shuffle.partitions: two tasks per
        executor core, at least four."""
        return max(4, 2 * self.executors * self.executor_cores)


class HealthReportsSpec(_Model):
    """Scheduled Spark health reports (consumer lag, SyncStateSet history, tiering
    candidates): a CronJob that runs spark-submit (by default in local mode inside its
    pod; ``spark`` chooses the engine), reads the cluster through the controllers'
    admin API and writes each report (HTML, JSON summary, Parquet) to a volume.
    Removing healthReports removes the CronJob; the reports stay."""

    schedule: str = Field(
        default="0 * * * *",
        pattern=CRON_PATTERN,
        max_length=128,
        description=(
            "when to run, in cron syntax: five fields (minute hour day-of-month month "
            "day-of-week) or a macro such as @hourly"
        ),
    )
    time_zone: str | None = Field(
        default=None,
        max_length=64,
        description=(
            "the IANA time zone the schedule is read in (e.g. Europe/Berlin); default: "
            "the Kubernetes controller manager's, usually UTC"
        ),
    )
    jobs: list[HealthJob] = Field(
        default_factory=lambda: list(ALL_HEALTH_JOBS),
        min_length=1,
        max_length=len(ALL_HEALTH_JOBS),
        description="which jobs to run: lag, sss-history, tiering (each at most once)",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    output: str = Field(
        default="",
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$",
        description=(
            "the name of an existing PersistentVolumeClaim in the cluster's namespace to "
            "write the reports to (each run in <timestamp>/, latest pointing at the newest); "
            "empty: the operator makes one, <cluster>-health-reports, as storage says"
        ),
    )
    storage: HealthReportStorageSpec = Field(default_factory=HealthReportStorageSpec)
    image: str = Field(
        default="",
        max_length=512,
        description=(
            "the image the CronJob runs; empty: the rocketcluster-spark-jobs image released "
            "with spec.image (same registry and tag). Required when spec.image is not a "
            "rocketcluster-broker image"
        ),
    )
    history_hours: float = Field(
        default=24.0, gt=0, le=24 * 366, description="how far back each report reads"
    )
    prices: HealthReportPrices | None = None
    driver_memory: str = Field(
        default="1g",
        pattern=r"^[0-9]+[kmgt]?$",
        description=(
            "the Spark driver's JVM heap (spark-submit --driver-memory, e.g. 1g); leave "
            "room in resources.limits.memory for the Python workers"
        ),
    )
    resources: ResourcesSpec = Field(
        default_factory=lambda: ResourcesSpec(
            requests={"cpu": "1", "memory": "2Gi"}, limits={"memory": "2Gi"}
        )
    )
    active_deadline_seconds: int = Field(
        default=3600,
        ge=60,
        description="a run still going after this long is stopped (and counts as failed)",
    )
    successful_jobs_history_limit: int = Field(
        default=3, ge=0, le=100, description="successful runs (Jobs) kept, for their logs"
    )
    failed_jobs_history_limit: int = Field(
        default=1, ge=0, le=100, description="failed runs (Jobs) kept, for their logs"
    )
    suspend: bool = Field(
        default=False, description="pause the schedule (a run in progress goes on)"
    )
    spark: HealthReportSparkSpec = Field(default_factory=HealthReportSparkSpec)

    @model_validator(mode="after")
    def _jobs_once(self) -> Self:
        dupes = sorted({j for j in self.jobs if self.jobs.count(j) > 1})
        if dupes:
            raise ValueError(f"healthReports.jobs names {', '.join(dupes)} twice")
        return self


# Kubernetes only (the CRD): rocketctl local makes its own CA and ignores secretName.
_TLS_RULES: JsonValue = [
    {
        "rule": "!self.enabled || has(self.secretName)",
        "message": "enabled needs secretName in Kubernetes: a Secret with tls.crt, tls.key "
        "and ca.crt (what a cert-manager Certificate writes)",
    },
]


class TlsSpec(_Model):
    """``spec.security.tls``: TLS on every port (client gRPC, admin HTTP), mutual TLS
    between brokers (replication) and with the controllers (Raft, registration)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _TLS_RULES})

    enabled: bool = False
    # Kubernetes: a Secret with ``tls.crt``, ``tls.key`` and ``ca.crt`` (what a
    # cert-manager Certificate writes), mounted into every broker and controller; its
    # SANs must cover their Services and pods. Local mode ignores it: ``rocketctl
    # local up`` creates a CA and one certificate per process under its directory.
    secret_name: str | None = Field(default=None, max_length=253)


class AuthSpec(_Model):
    """``spec.security.auth``: AK/SK signatures on every client request (RocketMQ ACL
    2.0's ``MQv2-HMAC-SHA1``), per-topic and per-group permissions from the users
    (``spec.users[]`` / RocketUser), and a token for the admin API and metrics."""

    enabled: bool = False
    # A client's x-mq-date-time may differ from the broker's clock by this much.
    clock_skew_seconds: int = Field(default=900, ge=1, le=86_400)
    # Kubernetes: the Secret (key ``token``) that holds the admin API token; the
    # operator creates it when it does not exist.
    admin_token_secret: str | None = Field(default=None, max_length=253)


class SecuritySpec(_Model):
    tls: TlsSpec = Field(default_factory=TlsSpec)
    auth: AuthSpec = Field(default_factory=AuthSpec)


class PlacementSpec(_Model):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)


class ServiceType(StrEnum):
    """How a Service is reached (Kubernetes' own terms)."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


CONSOLE_PORT = 8090
# A host name as an Ingress rule takes it: DNS labels, optionally under one leading
# wildcard label (``*.example.com``).
INGRESS_HOST_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class ConsoleServiceSpec(_Model):
    """The console's Service ``<cluster>-console``."""

    type: ServiceType = Field(
        default=ServiceType.CLUSTER_IP,
        description=(
            "ClusterIP (reach it through an Ingress or kubectl port-forward), NodePort or "
            "LoadBalancer"
        ),
    )
    port: int = Field(
        default=CONSOLE_PORT,
        ge=1,
        le=65535,
        description="the Service's port (the container always listens on 8090)",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="annotations of the Service, e.g. a cloud load balancer's settings",
    )


_INGRESS_RULES: JsonValue = [
    {
        "rule": "!self.enabled || (has(self.host) && self.host != '')",
        "message": "ingress.enabled needs ingress.host: the host name the console is "
        "served at (e.g. console.example.com)",
    },
]


class ConsoleIngressSpec(_Model):
    """An Ingress ``<cluster>-console`` in front of the console's Service."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _INGRESS_RULES})

    enabled: bool = Field(default=False, description="render the Ingress (needs host)")
    host: str | None = Field(
        default=None,
        max_length=253,
        pattern=INGRESS_HOST_PATTERN,
        description="the host name the console is served at, e.g. console.example.com",
    )
    class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_K8S_NAME_PATTERN,
        description="the IngressClass (ingressClassName); default: the cluster's default class",
    )
    path: str = Field(
        default="/",
        max_length=1024,
        pattern=r"^/[^\s]*$",
        description="the path prefix the console is served under (pathType Prefix)",
    )
    tls_secret_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_K8S_NAME_PATTERN,
        description=(
            "a Secret (tls.crt, tls.key) for HTTPS at the Ingress for host; none: plain HTTP "
            "unless the Ingress controller terminates TLS on its own"
        ),
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="annotations of the Ingress, e.g. cert-manager's or the controller's",
    )

    @model_validator(mode="after")
    def _host_when_enabled(self) -> Self:
        if self.enabled and not self.host:
            raise ValueError(
                "ingress.enabled needs ingress.host: the host name the console is served at "
                "(e.g. console.example.com)"
            )
        return self


class ConsoleSpec(_Model):
    """The web console (``rocketcluster-console``): pages to see and operate the
    cluster, reading it only through the controllers' and brokers' admin APIs. The
    operator renders its config, Deployment and Service (and an Ingress when asked);
    ``enabled: false`` or removing the section removes them."""

    enabled: bool = Field(default=False, description="run the console")
    replicas: int = Field(
        default=1,
        ge=1,
        le=10,
        description=(
            "console pods; more than one share the session key. With healthReports on a "
            "ReadWriteOnce volume, pods on another node than the report job cannot mount it"
        ),
    )
    image: str = Field(
        default="",
        max_length=512,
        description=(
            "the console's image; empty: the rocketcluster-console image released with "
            "spec.image (same registry and tag). Required when spec.image is not a "
            "rocketcluster-broker image"
        ),
    )
    resources: ResourcesSpec = Field(
        default_factory=lambda: ResourcesSpec(
            requests={"cpu": "50m", "memory": "128Mi"}, limits={"memory": "512Mi"}
        ),
        description="the console container's resources",
    )
    service: ConsoleServiceSpec = Field(
        default_factory=ConsoleServiceSpec, description="the console's Service"
    )
    ingress: ConsoleIngressSpec = Field(
        default_factory=ConsoleIngressSpec, description="an Ingress for the console (off)"
    )


class LabelSelectorRequirement(_Model):
    """One ``matchExpressions`` entry of a Kubernetes label selector."""

    key: str = Field(min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(_Model):
    """A Kubernetes label selector; empty selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class NetworkPeer(_Model):
    """Pods a NetworkPolicy admits, as its ``from`` entries name them: the pods that
    ``podSelector`` selects in the namespaces ``namespaceSelector`` selects (unset:
    the cluster's own namespace; empty: every namespace)."""

    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None


# The operator's pods as the chart labels them (charts/rocketcluster-operator,
# selectorLabels and component), in whatever namespace it was installed.
OPERATOR_POD_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": "rocketcluster-operator",
    "app.kubernetes.io/component": "operator",
}
PROMETHEUS_POD_LABELS: dict[str, str] = {"app.kubernetes.io/name": "prometheus"}


class NetworkPoliciesSpec(_Model):
    """NetworkPolicies for the cluster's pods (ingress only): the client port open to
    ``clientNamespaces``, replication only inside a broker group (and from the
    controllers, which ask a master to hand over on its HA port), the controller port
    only from controllers and brokers, admin APIs and /metrics only from the operator,
    the console, the health reports, Prometheus and ``extraAdminPeers``."""

    enabled: bool = Field(default=True, description="render the NetworkPolicies")
    client_namespaces: list[str] | None = Field(
        default=None,
        description=(
            "namespaces whose pods may use the client port (8081); unset: every source, "
            "[]: none but the cluster's brokers, canary and operator, which are always "
            "admitted"
        ),
    )
    operator: NetworkPeer = Field(
        default_factory=lambda: NetworkPeer(
            namespace_selector=LabelSelector(),
            pod_selector=LabelSelector(match_labels=OPERATOR_POD_LABELS),
        ),
        description="the operator's pods (default: the chart's labels, any namespace)",
    )
    prometheus: NetworkPeer = Field(
        default_factory=lambda: NetworkPeer(
            namespace_selector=LabelSelector(),
            pod_selector=LabelSelector(match_labels=PROMETHEUS_POD_LABELS),
        ),
        description="the Prometheus pods that scrape /metrics on the admin port",
    )
    extra_admin_peers: list[NetworkPeer] = Field(
        default_factory=list, description="more pods admitted to the admin port (8080)"
    )


_CANARY_RULES: JsonValue = [
    {
        "rule": f"!self.{field}.startsWith('RMQ_SYS_') && !self.{field}.startsWith('%RETRY%') "
        f"&& !self.{field}.startsWith('%DLQ%')",
        "message": f"canary.{field}: names starting with RMQ_SYS_, %RETRY% or %DLQ% are reserved",
    }
    for field in ("topic", "consumerGroup")
]


class CanarySpec(_Model):
    """A canary (``rocketctl canary`` in a Deployment ``<cluster>-canary``, from the
    brokers' image): every interval it sends a message through each broker group's
    client Service and receives it back, and exports the end-to-end latency and the
    success ratio per group (``rocketmq_canary_*``); RocketClusterCanaryFailing fires
    for a group none of whose probes has come back for 3 minutes."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _CANARY_RULES})

    enabled: bool = Field(default=False, description="run the canary")
    interval_seconds: float = Field(
        default=5.0, ge=1, le=300, description="seconds between two probes of a group"
    )
    timeout_seconds: float = Field(
        default=10.0,
        ge=1,
        le=300,
        description="a probe whose message has not come back within this fails",
    )
    topic: str = Field(
        default="rocketcluster-canary",
        min_length=1,
        max_length=127,
        pattern=r"^[%|a-zA-Z0-9_-]+$",
        description="the topic the canary sends to (the operator puts it in the catalogue)",
    )
    consumer_group: str = Field(
        default="rocketcluster-canary",
        min_length=1,
        max_length=120,
        pattern=r"^[%|a-zA-Z0-9_-]+$",
        description="the consumer group it receives with (put in the catalogue too)",
    )
    image: str = Field(
        default="",
        max_length=512,
        description="the canary's image; empty: spec.image (the brokers' image carries it)",
    )
    resources: ResourcesSpec = Field(
        default_factory=lambda: ResourcesSpec(
            requests={"cpu": "20m", "memory": "96Mi"}, limits={"memory": "256Mi"}
        ),
        description="the canary container's resources",
    )

    @model_validator(mode="after")
    def _names_not_reserved(self) -> Self:
        from rocketcluster.api.canary_config import canary_group_problem, canary_topic_problem

        for what, name, problem in (
            ("topic", self.topic, canary_topic_problem(self.topic)),
            ("consumerGroup", self.consumer_group, canary_group_problem(self.consumer_group)),
        ):
            if problem:
                raise ValueError(f"canary.{what} {name!r}: {problem}")
        return self


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


DEFAULT_IMAGE = "ghcr.io/rocketcluster/rocketcluster-broker:0.1.0"
BROKER_IMAGE_NAME = "rocketcluster-broker"
CONTROLLER_IMAGE_NAME = "rocketcluster-controller"


SPARK_JOBS_IMAGE_NAME = "rocketcluster-spark-jobs"
CONSOLE_IMAGE_NAME = "rocketcluster-console"
# spec.image values that name one of our broker images (by tag, not digest): their
# twins can be derived. The CEL rule below says the same as _twin.
OUR_BROKER_IMAGE = rf"^([^@]*/)?{BROKER_IMAGE_NAME}(:[^/@]+)?$"


def _twin(broker_image: str, name: str) -> str | None:
    """``broker_image`` with the repository's last part renamed to ``name`` (same
    registry, path and tag), or None when it is not one of ours or is pinned by
    digest (a digest names one image: it cannot be renamed)."""
    if "@" in broker_image:
        return None
    head, slash, last = broker_image.rpartition("/")
    repo, colon, tag = last.partition(":")
    if repo != BROKER_IMAGE_NAME:
        return None
    return f"{head}{slash}{name}{colon}{tag}"


def controller_image_for(broker_image: str) -> str:
    """The controller image released with ``broker_image``: the same registry, path and
    tag with the repository's last part renamed. Brokers and
    controllers ship as two images from one build, so changing ``spec.image`` to a new
    release rolls both; an image not named like ours is taken to carry both programs."""
    return _twin(broker_image, CONTROLLER_IMAGE_NAME) or broker_image


def spark_jobs_image_for(broker_image: str) -> str | None:
    """The Spark jobs image released with ``broker_image`` (the same build, registry
    and tag), so a new ``spec.image`` moves the reports along; None when it cannot be
    derived — a broker image carries no Java or Spark, so it is never the answer."""
    return _twin(broker_image, SPARK_JOBS_IMAGE_NAME)


def console_image_for(broker_image: str) -> str | None:
    """The console image released with ``broker_image`` (the same build, registry and
    tag), so a new ``spec.image`` moves the console along; None when it cannot be
    derived (a broker image does not carry the console)."""
    return _twin(broker_image, CONSOLE_IMAGE_NAME)


_CLUSTER_RULES: JsonValue = [
    {
        "rule": "self.brokers.replicas == 1 || self.controller.replicas > 0",
        "message": "replicated broker groups need controllers (controller.replicas 1, 3 or 5)",
    },
    {
        "rule": "!has(self.healthReports) || self.controller.replicas > 0",
        "message": "healthReports read the cluster through its controllers (controller.replicas "
        "1, 3 or 5)",
    },
    {
        "rule": "!has(self.healthReports) || self.healthReports.image != '' "
        f"|| self.image.matches('{OUR_BROKER_IMAGE}')",
        "message": "healthReports.image is needed when spec.image is not a "
        f"{BROKER_IMAGE_NAME} image by tag (its {SPARK_JOBS_IMAGE_NAME} twin cannot be derived)",
    },
    {
        "rule": "!has(self.console) || !self.console.enabled || self.console.image != '' "
        f"|| self.image.matches('{OUR_BROKER_IMAGE}')",
        "message": "console.image is needed when spec.image is not a "
        f"{BROKER_IMAGE_NAME} image by tag (its {CONSOLE_IMAGE_NAME} twin cannot be derived)",
    },
]


class RocketClusterSpec(_Model):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _CLUSTER_RULES})

    image: str = Field(
        default=DEFAULT_IMAGE,
        min_length=1,
        max_length=512,
        description=(
            "the brokers' image (and, unless controller.image is set, the controllers' "
            "through its rocketcluster-controller twin); changing it rolls the cluster"
        ),
    )
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    brokers: BrokersSpec = Field(default_factory=BrokersSpec)
    tiered_storage: TieredStorageSpec = Field(default_factory=TieredStorageSpec)
    topics: list[TopicSpec] = Field(default_factory=list, json_schema_extra=LIST_MAP_BY_NAME)
    consumer_groups: list[ConsumerGroupSpec] = Field(
        default_factory=list, json_schema_extra=LIST_MAP_BY_NAME
    )
    # Users and their permissions when security.auth is on (or RocketUser resources).
    users: list[UserSpec] = Field(default_factory=list, json_schema_extra=LIST_MAP_BY_NAME)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    health_reports: HealthReportsSpec | None = None
    console: ConsoleSpec = Field(
        default_factory=ConsoleSpec,
        description="the web console (off unless enabled)",
    )
    canary: CanarySpec = Field(
        default_factory=CanarySpec,
        description="a probe that produces and consumes through every broker group (off)",
    )
    security: SecuritySpec = Field(default_factory=SecuritySpec)
    network_policies: NetworkPoliciesSpec = Field(
        default_factory=NetworkPoliciesSpec,
        description="NetworkPolicies for the cluster's pods (on unless enabled: false)",
    )
    placement: PlacementSpec = Field(default_factory=PlacementSpec)

    @model_validator(mode="after")
    def _replicated_needs_controllers(self) -> Self:
        if self.brokers.replicas > 1 and self.controller.replicas == 0:
            raise ValueError(
                "replicated broker groups need controllers (controller.replicas 1, 3 or 5)"
            )
        return self

    @model_validator(mode="after")
    def _health_reports_can_run(self) -> Self:
        reports = self.health_reports
        if reports is None:
            return self
        if self.controller.replicas == 0:
            raise ValueError(
                "healthReports read the cluster through its controllers "
                "(controller.replicas 1, 3 or 5)"
            )
        if not reports.image and spark_jobs_image_for(self.image) is None:
            raise ValueError(
                f"healthReports.image is needed: spec.image {self.image!r} is not a "
                f"{BROKER_IMAGE_NAME} image by tag, so its {SPARK_JOBS_IMAGE_NAME} twin "
                "cannot be derived"
            )
        return self

    @model_validator(mode="after")
    def _console_can_run(self) -> Self:
        console = self.console
        if not console.enabled:
            return self
        if not console.image and console_image_for(self.image) is None:
            raise ValueError(
                f"console.image is needed: spec.image {self.image!r} is not a "
                f"{BROKER_IMAGE_NAME} image by tag, so its {CONSOLE_IMAGE_NAME} twin "
                "cannot be derived"
            )
        return self

    @model_validator(mode="after")
    def _topic_limits_fit(self) -> Self:
        broker_max = self.brokers.max_message_bytes
        over = [
            f"{t.name} ({t.max_message_bytes})"
            for t in self.topics
            if t.max_message_bytes is not None and t.max_message_bytes > broker_max
        ]
        if over:
            raise ValueError(
                f"topics.maxMessageBytes above brokers.maxMessageBytes ({broker_max}): "
                f"{', '.join(over)}; lower them or raise brokers.maxMessageBytes"
            )
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for kind, names in (
            ("topic", [t.name for t in self.topics]),
            ("consumer group", [g.name for g in self.consumer_groups]),
            ("user", [u.name for u in self.users]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind} names declared twice: {', '.join(dupes)}")
        return self

    def controller_image(self) -> str:
        """The image controller members run: ``controller.image``, or the controller
        twin of ``image`` (:func:`controller_image_for`)."""
        return self.controller.image or controller_image_for(self.image)

    def health_reports_image(self) -> str:
        """The image the health report CronJob runs: ``healthReports.image``, or the
        Spark jobs twin of ``image`` (:func:`spark_jobs_image_for`); the validators
        make sure one of them exists."""
        reports = self.health_reports or HealthReportsSpec()
        derived = spark_jobs_image_for(self.image)
        image = reports.image or derived
        if not image:
            raise ValueError("healthReports.image is needed (spec.image has no Spark twin)")
        return image

    def console_image(self) -> str:
        """The image the console runs: ``console.image``, or the console twin of
        ``image`` (:func:`console_image_for`); the validators make sure one exists."""
        image = self.console.image or console_image_for(self.image)
        if not image:
            raise ValueError("console.image is needed (spec.image has no console twin)")
        return image


class ObjectMeta(_Model):
    """The part of ``metadata`` a manifest sets; what the API server adds (uid,
    resourceVersion, …) is ignored."""

    model_config = ConfigDict(
        extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]
    namespace: str = "default"
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class RocketCluster(_Model):
    api_version: Literal["rocketcluster.io/v1alpha1"] = "rocketcluster.io/v1alpha1"
    kind: Literal["RocketCluster"] = "RocketCluster"
    metadata: ObjectMeta
    spec: RocketClusterSpec = Field(default_factory=RocketClusterSpec)
    status: RocketClusterStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    def broker_group_name(self, index: int) -> str:
        return f"{self.metadata.name}-broker-{index}"


class ManifestError(ValueError):
    """A manifest that cannot be used, with the file and every problem found."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


def load_manifest(path: Path) -> RocketCluster:
    """Read a RocketCluster manifest (YAML), with errors that name the field."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(str(path), [str(exc)]) from exc
    clusters = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if len(clusters) != 1:
        raise ManifestError(str(path), [f"expected one {KIND} document, found {len(clusters)}"])
    try:
        return RocketCluster.model_validate(clusters[0])
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ManifestError(str(path), problems) from exc
