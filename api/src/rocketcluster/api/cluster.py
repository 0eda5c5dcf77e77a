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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec

API_VERSION = "rocketcluster.io/v1alpha1"
KIND = "RocketCluster"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ResourcesSpec(_Model):
    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)


class StorageSpec(_Model):
    size: str = "10Gi"
    storage_class_name: str | None = None


class ControllerSpec(_Model):
    replicas: Literal[0, 1, 3, 5] = Field(
        default=3, description="controller members; 0 runs brokers standalone (no controller)"
    )
    storage: StorageSpec = Field(default_factory=lambda: StorageSpec(size="1Gi"))
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)


class ReplicationMode(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class ReplicationSpec(_Model):
    mode: ReplicationMode = ReplicationMode.SYNC
    in_sync_replicas: int = Field(default=1, ge=1)
    min_in_sync_replicas: int = Field(default=1, ge=1)
    all_ack_in_sync_state_set: bool = False
    unclean_election: bool = False


class FlushPolicy(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class BrokersSpec(_Model):
    groups: int = Field(default=1, ge=0, le=64)
    replicas: int = Field(default=1, ge=1, le=7)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    replication: ReplicationSpec = Field(default_factory=ReplicationSpec)
    flush: FlushPolicy = FlushPolicy.ASYNC
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=64 * 1024 * 1024)
    retention_hours: float = Field(default=72.0, gt=0)
    auto_create_topics: bool = False

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


class TieredBackend(StrEnum):
    POSIX = "posix"
    S3 = "s3"


class TieredReadPolicy(StrEnum):
    DISABLE = "DISABLE"
    NOT_IN_DISK = "NOT_IN_DISK"
    NOT_IN_MEM = "NOT_IN_MEM"
    FORCE = "FORCE"


class TieredStorageSpec(_Model):
    enabled: bool = False
    backend: TieredBackend = TieredBackend.POSIX
    read_policy: TieredReadPolicy = TieredReadPolicy.NOT_IN_DISK
    local_retention_hours: float = Field(default=24.0, gt=0)
    remote_retention_hours: float = Field(default=720.0, gt=0)
    options: dict[str, str] = Field(default_factory=dict)


HealthJob = Literal["lag", "sss-history", "tiering"]
ALL_HEALTH_JOBS: tuple[HealthJob, ...] = ("lag", "sss-history", "tiering")


class MonitoringSpec(_Model):
    service_monitor: bool = False
    prometheus_rule: bool = False
    grafana_dashboards: bool = False


class HealthReportsSpec(_Model):
    schedule: str = "0 * * * *"
    jobs: list[HealthJob] = Field(default_factory=lambda: list(ALL_HEALTH_JOBS))
    output: str = ""


class SecuritySpec(_Model):
    tls: bool = False
    auth: bool = False


class PlacementSpec(_Model):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)


class RocketClusterSpec(_Model):
    image: str = "rocketcluster/broker:latest"
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    brokers: BrokersSpec = Field(default_factory=BrokersSpec)
    tiered_storage: TieredStorageSpec = Field(default_factory=TieredStorageSpec)
    topics: list[TopicSpec] = Field(default_factory=list)
    consumer_groups: list[ConsumerGroupSpec] = Field(default_factory=list)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    health_reports: HealthReportsSpec | None = None
    security: SecuritySpec = Field(default_factory=SecuritySpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for kind, names in (
            ("topic", [t.name for t in self.topics]),
            ("consumer group", [g.name for g in self.consumer_groups]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind} names declared twice: {', '.join(dupes)}")
        return self


class ObjectMeta(_Model):
    name: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]
    namespace: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class RocketCluster(_Model):
    api_version: Literal["rocketcluster.io/v1alpha1"] = "rocketcluster.io/v1alpha1"
    kind: Literal["RocketCluster"] = "RocketCluster"
    metadata: ObjectMeta
    spec: RocketClusterSpec = Field(default_factory=RocketClusterSpec)

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
