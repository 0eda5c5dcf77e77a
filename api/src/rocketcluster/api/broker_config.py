"""BrokerProcessConfig: what one broker process needs, rendered from a RocketCluster by
the operator (a ConfigMap) or by ``rocketctl local`` (a file) — the same model both
ways, so local mode runs exactly what Kubernetes runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rocketcluster.api.auth import AuthProcessConfig
from rocketcluster.api.cluster import (
    DiskFullPolicy,
    FlushPolicy,
    FrontProcesses,
    ReplicationSpec,
)
from rocketcluster.api.limits import ClientLimits
from rocketcluster.api.stats import DEFAULT_STATS_INTERVAL_SECONDS
from rocketcluster.api.tiered_spec import TieredBackend, TieredStorageSpec
from rocketcluster.api.tls import TlsFiles
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec

CLIENT_PORT = 8081
ADMIN_PORT = 8080
HA_PORT = 10912
CONTROLLER_PORT = 9878
DEFAULT_TRACE_SAMPLE_EVERY = 100


# The environment variables that carry S3 credentials to a broker (boto3 reads them),
# named as the keys of tieredStorage.s3.credentialsSecret: required, then optional.
S3_CREDENTIAL_ENV: Final = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
S3_OPTIONAL_CREDENTIAL_ENV: Final = ("AWS_SESSION_TOKEN",)


def s3_credential_env(tiered: TieredStorageSpec) -> dict[str, bool]:
    """The environment variables a broker needs for ``tiered``'s S3 credentials, each
    with whether it must be set: the keys of ``s3.credentialsSecret`` (the operator
    takes them from that Secret). Empty when nothing comes from a Secret: tiering off,
    the posix backend, or the pods' own identity (IRSA, an instance profile)."""
    if not tiered.enabled or tiered.backend is not TieredBackend.S3 or tiered.s3 is None:
        return {}
    if tiered.s3.credentials_secret is None:
        return {}
    return {
        **{name: True for name in S3_CREDENTIAL_ENV},
        **{name: False for name in S3_OPTIONAL_CREDENTIAL_ENV},
    }


def registered_address(client_endpoint: str, ha_endpoint: str) -> str:
    """What a broker registers with the controllers: ``client-endpoint|ha-endpoint``
    (group views list it per replica)."""
    return f"{client_endpoint}|{ha_endpoint}"


def split_registered(registered: str) -> tuple[str, str]:
    """(client endpoint, HA endpoint) of a registered address (an address without
    the HA part serves both)."""
    client, _, ha = registered.partition("|")
    return client, ha or client


class MessagingTuning(BaseModel):
    """Timings of the messaging layer; tests shorten them, production keeps defaults."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    long_polling_max_ms: int = Field(default=30_000, ge=100)
    auto_renew_invisible_ms: int = Field(default=60_000, ge=1000)
    min_invisible_ms: int = Field(default=1000, ge=1)
    max_invisible_ms: int = Field(default=12 * 3600 * 1000, ge=1000)
    max_delay_seconds: int = Field(default=3 * 86400, ge=1)
    transaction_check_delay_ms: int = Field(default=6000, ge=100)
    transaction_check_interval_ms: int = Field(default=30_000, ge=100)
    transaction_check_max: int = Field(default=15, ge=1)
    consume_state_persist_ms: int = Field(default=1000, ge=10)
    client_expiry_ms: int = Field(default=120_000, ge=1000)
    # A simple consumer's receive that finds nothing on this master is answered by
    # another broker group that has messages for it (messaging/cross_group.py). Left
    # out of the file when on (the default): renders stay as they were.
    cross_group_receive: bool = Field(default=True, exclude_if=lambda v: v is True)


DEFAULT_HEARTBEAT_TIMEOUT_MS = 3000


class HATuning(BaseModel):
    """Replication timings (RocketMQ: syncFlushTimeout, haMaxTimeSlaveNotCatchup)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    # How long a sync write waits for its acks before FLUSH_SLAVE_TIMEOUT.
    ack_timeout_ms: int = Field(default=3000, ge=10)
    # A slave that has not caught up for this long leaves the SyncStateSet. Longer
    # than ack_timeout_ms: a slave that stalls makes writes time out before the set
    # shrinks under them.
    max_time_not_catchup_ms: int = Field(default=8000, ge=100)
    # How long the controllers wait for this broker's heartbeat before they count it
    # dead and replace it if it was master (RocketMQ: controllerHeartBeatTimeoutMills).
    # It heartbeats every third of it, at most every second, so one late heartbeat is
    # not a death. Left out of the file at its default: renders stay as they were.
    controller_heartbeat_timeout_ms: int = Field(
        default=DEFAULT_HEARTBEAT_TIMEOUT_MS,
        ge=300,
        exclude_if=lambda v: v == DEFAULT_HEARTBEAT_TIMEOUT_MS,
    )


class BrokerProcessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    cluster: str
    group: str
    broker_id: int = Field(default=0, ge=0)
    data_dir: Path
    bind_host: str = "0.0.0.0"
    advertised_host: str = "127.0.0.1"
    client_port: int = Field(default=CLIENT_PORT, ge=0, le=65535)
    admin_port: int = Field(default=ADMIN_PORT, ge=0, le=65535)
    ha_port: int = Field(default=HA_PORT, ge=0, le=65535)
    # What routes advertise for this group: the group endpoint that follows the master
    # (a Service in Kubernetes, rocketctl local's proxy here); this broker by default.
    group_endpoint: str | None = None
    controllers: list[str] = Field(default_factory=list)
    # Every broker group of the cluster and its client endpoint, for routes (a topic
    # has queues on every group); empty: this group alone.
    route_groups: dict[str, str] = Field(default_factory=dict)
    replication: ReplicationSpec = Field(default_factory=ReplicationSpec)
    flush: FlushPolicy = FlushPolicy.ASYNC
    max_message_bytes: int = 4 * 1024 * 1024
    client_limits: ClientLimits = Field(default_factory=ClientLimits)
    # Client-facing processes beside the store process (broker/front): "auto" sizes
    # them to the container's CPU quota, 0 serves the client port from this process.
    # Written only when not "auto": a broker of the previous release (which forbids
    # fields it does not know) still reads the config an upgraded operator renders.
    front_processes: FrontProcesses = Field(default="auto", exclude_if=lambda v: v == "auto")
    retention_hours: float = 72.0
    auto_create_topics: bool = False
    topics: list[TopicSpec] = Field(default_factory=list)
    consumer_groups: list[ConsumerGroupSpec] = Field(default_factory=list)
    messaging: MessagingTuning = Field(default_factory=MessagingTuning)
    ha: HATuning = Field(default_factory=HATuning)
    segment_size: int | None = None
    # The store's disk guards (StoreConfig: retention deletes from the head above
    # disk_max_used_ratio, writes are refused above disk_full_ratio); None keeps the
    # store's defaults. Tests raise them so that how full the host's disk is never
    # deletes the messages they audit.
    disk_max_used_ratio: float | None = Field(default=None, gt=0, le=1)
    disk_full_ratio: float | None = Field(default=None, gt=0, le=1)
    # spec.brokers.diskFull. Written only when not "reject": a broker of the previous
    # release (which forbids fields it does not know) still reads the config.
    disk_full: DiskFullPolicy = Field(
        default=DiskFullPolicy.REJECT, exclude_if=lambda v: v == DiskFullPolicy.REJECT
    )
    # How often the master appends a stats snapshot to the stats topic (api/stats.py);
    # 0 turns publishing off. Tests and local clusters shorten it (e.g. 1.0).
    stats_interval_seconds: float = Field(default=DEFAULT_STATS_INTERVAL_SECONDS, ge=0)
    # Topics with trace "sampled" trace one message id in this many (a hash of the id,
    # so every event of a message is kept or none: messaging/trace.py). Left out of
    # the file at its default: renders stay as they were.
    trace_sample_every: int = Field(
        default=DEFAULT_TRACE_SAMPLE_EVERY,
        ge=1,
        exclude_if=lambda v: v == DEFAULT_TRACE_SAMPLE_EVERY,
    )
    # spec.tieredStorage as the manifest says it, with a relative posix.path already
    # resolved by rocketctl local. Never a secret: S3 credentials reach the process as
    # environment variables (s3_credential_env).
    tiered_storage: TieredStorageSpec = Field(default_factory=TieredStorageSpec)
    # Keep this pod's ``rocketcluster.io/role`` label current (Kubernetes, replicated
    # groups: the group's client Service selects role=master); needs POD_NAME,
    # POD_NAMESPACE and a service account allowed to patch the pod.
    label_pod_role: bool = False
    # TLS on every port (api/tls.py): the client port and admin HTTP authenticate the
    # server, the HA port also requires the replicas' certificates; None: plaintext.
    # Left out of the file when off: a cluster without TLS renders the same files (and
    # pod hashes) as before the field existed, so upgrading the operator rolls nothing.
    tls: TlsFiles | None = Field(default=None, exclude_if=lambda v: v is None)
    # security.auth: where the users file and the admin token file are (never the
    # secrets themselves); off by default.
    # Left out of the rendered file while off: configs (and pod hashes) of clusters
    # without auth stay as they were.
    auth: AuthProcessConfig = Field(
        default_factory=AuthProcessConfig, exclude_if=lambda a: not a.enabled
    )

    @property
    def client_endpoint(self) -> str:
        return f"{self.advertised_host}:{self.client_port}"

    @property
    def route_endpoint(self) -> str:
        return self.group_endpoint or self.client_endpoint

    @property
    def node_id(self) -> str:
        return f"{self.group}-{self.broker_id}"

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(by_alias=True, indent=2))

    @classmethod
    def load(cls, path: Path) -> BrokerProcessConfig:
        return cls.model_validate(json.loads(path.read_text()))
