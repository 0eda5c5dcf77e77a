"""``spec.tieredStorage`` of a RocketCluster: where the tier lives (a POSIX directory or
S3), when reads go there and how long each side keeps data — with the rules S3 and
Kubernetes impose on names said once, for the model and (as CEL) for the API server."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Self

from pydantic import ConfigDict, Field, JsonValue, model_validator

from rocketcluster.api import kube
from rocketcluster.api.spec_model import SpecModel as _Model


class TieredBackend(StrEnum):
    POSIX = "posix"
    S3 = "s3"


class TieredReadPolicy(StrEnum):
    """When a read goes to the tier (RocketMQ's tiered store names): DISABLE never (the
    tier only receives uploads), NOT_IN_DISK for data local retention has removed,
    NOT_IN_MEM also for data no longer in the page cache, FORCE always."""

    DISABLE = "DISABLE"
    NOT_IN_DISK = "NOT_IN_DISK"
    NOT_IN_MEM = "NOT_IN_MEM"
    FORCE = "FORCE"


KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
# A DNS-1123 subdomain: what Kubernetes accepts as the name of a Secret or a claim.
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# S3's naming rules for general purpose buckets: 3 to 63 lower-case letters, digits,
# dots and hyphens, first and last a letter or digit; what a pattern cannot say is in
# _BUCKET_RULES (CEL, for the API server) and TieredS3Spec._bucket_rules (the model).
BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_IPV4 = r"^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$"
# A key prefix: parts of S3's safe characters joined by single slashes, no slash at
# either end (the broker adds /<cluster>/<group>/...).
_KEY_PART = r"[A-Za-z0-9!_.*'()=-]+"
S3_PREFIX_PATTERN = rf"^({_KEY_PART}(/{_KEY_PART})*)?$"
# What every rocketcluster pod mounts already (render/pods.py): not a place for the tier.
POD_OWN_MOUNTS = (kube.CONFIG_DIR, kube.DATA_DIR, "/tmp")


def _reserved(bucket: str) -> str | None:
    """The prefix or suffix S3 reserves that ``bucket`` uses, said as a phrase; None
    when it uses none."""
    for prefix in BUCKET_RESERVED_PREFIXES:
        if bucket.startswith(prefix):
            return f"the prefix {prefix}"
    for suffix in BUCKET_RESERVED_SUFFIXES:
        if bucket.endswith(suffix):
            return f"the suffix {suffix}"
    return None


_BUCKET_RULES: JsonValue = [
    {"rule": "!self.bucket.contains('..')", "message": "bucket: no two adjacent dots"},
    {
        "rule": f"!self.bucket.matches('{_IPV4}')",
        "message": "bucket: not formatted as an IP address",
    },
    {
        "rule": " && ".join(
            [f"!self.bucket.startsWith('{p}')" for p in BUCKET_RESERVED_PREFIXES]
            + [f"!self.bucket.endsWith('{s}')" for s in BUCKET_RESERVED_SUFFIXES]
        ),
        "message": f"bucket: S3 reserves the prefixes {', '.join(BUCKET_RESERVED_PREFIXES)} "
        f"and the suffixes {', '.join(BUCKET_RESERVED_SUFFIXES)}",
    },
]

_OWN_MOUNTS_CEL = ", ".join(f"'{m}', '{m}/'" for m in POD_OWN_MOUNTS)
# For the API server only: in a pod the tier is a mount, at an absolute path of its
# own. rocketctl local also takes a relative path (the model accepts it).
_POSIX_RULES: JsonValue = [
    {
        "rule": "self.path.startsWith('/')",
        "message": "path must be absolute in Kubernetes (where the broker pods mount the "
        "shared volume; a relative path is for rocketctl local)",
    },
    {
        "rule": f"!(self.path in [{_OWN_MOUNTS_CEL}])",
        "message": f"path: the broker pods mount {', '.join(POD_OWN_MOUNTS)} already",
    },
]


class TieredPosixSpec(_Model):
    """A directory every broker of the cluster shares (NFS, CephFS, EFS, …)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _POSIX_RULES})

    path: str = Field(
        min_length=1,
        max_length=1024,
        description=(
            "where the shared directory is: in Kubernetes the absolute path it is mounted "
            "at in every broker pod; in rocketctl local a directory of this machine, a "
            "relative path resolved against the local cluster's directory (--dir)"
        ),
    )
    claim_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=K8S_NAME_PATTERN,
        description=(
            "a ReadWriteMany PersistentVolumeClaim in the cluster's namespace that the "
            "operator mounts at path in every broker pod (writable by uid/gid 10001); "
            "unset: the operator mounts nothing and path must already be there, provided "
            "otherwise (e.g. a hostPath or CSI volume added by an admission webhook). "
            "Ignored by rocketctl local"
        ),
    )


class TieredS3Spec(_Model):
    """An S3 bucket (or an S3-compatible store: MinIO, Ceph RGW, moto)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _BUCKET_RULES})

    endpoint: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description=(
            "the S3 endpoint URL (http:// or https://, e.g. http://minio.storage:9000); "
            "unset: AWS's own endpoint for the region"
        ),
    )
    bucket: str = Field(
        min_length=3,
        max_length=63,
        pattern=BUCKET_PATTERN,
        description="the bucket (which must exist), named by S3's bucket naming rules",
    )
    prefix: str = Field(
        default="",
        max_length=512,
        pattern=S3_PREFIX_PATTERN,
        description=(
            "a key prefix, without a leading or trailing slash: objects go under "
            "<prefix>/<cluster>/<group>/... (the brokers add cluster and group)"
        ),
    )
    region: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="the bucket's region (e.g. eu-central-1); unset: the SDK's default",
    )
    credentials_secret: str | None = Field(
        default=None,
        max_length=253,
        pattern=K8S_NAME_PATTERN,
        description=(
            "the name of a Secret in the cluster's namespace with the keys "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and optionally "
            "AWS_SESSION_TOKEN), given to the brokers as environment variables (never "
            "written into their config files); unset: the pods' own identity (IRSA, "
            "EKS Pod Identity, an instance profile). rocketctl local ignores it: its "
            "brokers inherit the AWS_* environment of rocketctl"
        ),
    )

    @model_validator(mode="after")
    def _bucket_rules(self) -> Self:
        if ".." in self.bucket:
            raise ValueError(f"bucket {self.bucket!r}: no two adjacent dots")
        if re.fullmatch(_IPV4, self.bucket):
            raise ValueError(f"bucket {self.bucket!r}: not formatted as an IP address")
        reserved = _reserved(self.bucket)
        if reserved:
            raise ValueError(f"bucket {self.bucket!r}: S3 reserves {reserved}")
        return self


_TIERED_RULES: JsonValue = [
    {
        "rule": "!self.enabled || self.backend != 's3' || has(self.s3)",
        "message": "backend s3 needs an s3 section (with at least a bucket)",
    },
    {
        "rule": "!self.enabled || self.backend != 'posix' || has(self.posix)",
        "message": "backend posix needs a posix section (with at least a path)",
    },
]


class TieredStorageSpec(_Model):
    """Tiered storage: each group's master copies confirmed commit log data, per topic
    and queue, to a shared directory or an S3 bucket, and reads it back through the
    normal receive path once local retention has removed it. Every broker process gets
    this section in its config; S3 credentials reach it as environment variables."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _TIERED_RULES})

    enabled: bool = Field(default=False, description="upload to the tier and read from it")
    backend: TieredBackend = Field(
        default=TieredBackend.POSIX,
        description="posix (a shared directory: the posix section) or s3 (the s3 section)",
    )
    read_policy: TieredReadPolicy = Field(
        default=TieredReadPolicy.NOT_IN_DISK,
        description=(
            "when reads go to the tier: DISABLE never (upload only), NOT_IN_DISK for data "
            "no longer on the broker's disk, NOT_IN_MEM also for data not in memory, FORCE "
            "always"
        ),
    )
    posix: TieredPosixSpec | None = Field(
        default=None, description="the shared directory, for backend posix"
    )
    s3: TieredS3Spec | None = Field(default=None, description="the bucket, for backend s3")
    upload_batch_bytes: int = Field(
        default=4 * MIB,
        ge=4 * KIB,
        le=GIB,
        description="a queue's data is uploaded once this much is waiting (or after "
        "uploadIntervalSeconds)",
    )
    upload_interval_seconds: float = Field(
        default=20.0,
        gt=0,
        description="the longest confirmed data waits before it is uploaded, in seconds",
    )
    remote_retention_hours: float = Field(
        default=720.0, gt=0, description="how long the tier keeps data, in hours"
    )
    local_retention_hours: float | None = Field(
        default=None,
        gt=0,
        description=(
            "how long a broker keeps data on its disk once the tier holds it, in hours "
            "(data not yet uploaded is never deleted); unset: brokers.retentionHours"
        ),
    )
    read_ahead_bytes: int = Field(
        default=16 * MIB,
        ge=0,
        description="what a read from the tier fetches ahead and caches, at most, per broker "
        "(0: no read-ahead)",
    )

    @model_validator(mode="after")
    def _backend_configured(self) -> Self:
        if not self.enabled:
            return self
        if self.backend is TieredBackend.S3 and self.s3 is None:
            raise ValueError("backend s3 needs an s3 section (with at least a bucket)")
        if self.backend is TieredBackend.POSIX and self.posix is None:
            raise ValueError("backend posix needs a posix section (with at least a path)")
        return self
