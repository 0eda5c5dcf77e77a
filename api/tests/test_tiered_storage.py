"""spec.tieredStorage: the shape of issue #16 read and written in camelCase, refusals
that name the field and say what is wrong (by the model and by the CRD alike), and
what a broker's config carries of it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rocketcluster.api.broker_config import BrokerProcessConfig, s3_credential_env
from rocketcluster.api.cluster import ManifestError, RocketCluster, load_manifest
from rocketcluster.api.tiered_spec import TieredBackend, TieredReadPolicy, TieredStorageSpec
from rocketcluster.e2e.crd_check import crd_problems

ISSUE_SHAPE: dict[str, Any] = {
    "enabled": True,
    "backend": "s3",
    "readPolicy": "NOT_IN_MEM",
    "posix": {"path": "/mnt/tier"},
    "s3": {
        "endpoint": "http://127.0.0.1:5000",
        "bucket": "rocket-tier",
        "prefix": "prod/tiered",
        "credentialsSecret": "tier-credentials",
    },
    "uploadBatchBytes": 1 << 20,
    "uploadIntervalSeconds": 0.2,
    "remoteRetentionHours": 48,
}


def _manifest(tiered: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "tiered"},
        "spec": {"controller": {"replicas": 1}, "tieredStorage": tiered},
    }


def _problems(tiered: dict[str, Any], tmp_path: Path) -> list[str]:
    """What ``rocketctl local`` says of a manifest with this tieredStorage."""
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(_manifest(tiered)))
    with pytest.raises(ManifestError) as refused:
        load_manifest(path)
    return refused.value.problems


def test_the_issue_shape_round_trips_in_camel_case() -> None:
    spec = TieredStorageSpec.model_validate(ISSUE_SHAPE)
    assert spec.backend is TieredBackend.S3
    assert spec.read_policy is TieredReadPolicy.NOT_IN_MEM
    assert spec.s3 is not None and spec.s3.credentials_secret == "tier-credentials"
    assert spec.posix is not None and spec.posix.claim_name is None
    assert spec.upload_interval_seconds == 0.2
    written = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert written == ISSUE_SHAPE
    assert TieredStorageSpec.model_validate(written) == spec
    assert crd_problems(_manifest(ISSUE_SHAPE)) == []


def test_defaults_say_nothing_is_tiered() -> None:
    spec = RocketCluster.model_validate({"metadata": {"name": "x"}}).spec.tiered_storage
    assert spec == TieredStorageSpec()
    assert not spec.enabled
    assert spec.backend is TieredBackend.POSIX and spec.posix is None and spec.s3 is None
    assert spec.read_policy is TieredReadPolicy.NOT_IN_DISK
    assert spec.upload_batch_bytes == 4 << 20
    assert spec.upload_interval_seconds == 20.0
    assert spec.remote_retention_hours == 720.0
    assert spec.local_retention_hours is None
    assert spec.read_ahead_bytes == 16 << 20


def test_a_disabled_tier_needs_no_backend_section() -> None:
    for backend in ("posix", "s3"):
        tiered = {"enabled": False, "backend": backend}
        TieredStorageSpec.model_validate(tiered)
        assert crd_problems(_manifest(tiered)) == []


def test_upload_only_is_allowed() -> None:
    tiered = {"enabled": True, "readPolicy": "DISABLE", "posix": {"path": "/mnt/tier"}}
    assert TieredStorageSpec.model_validate(tiered).read_policy is TieredReadPolicy.DISABLE
    assert crd_problems(_manifest(tiered)) == []


# (tieredStorage, what the model's message holds, what the CRD's message holds)
REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "s3 without its section": (
        {"enabled": True, "backend": "s3"},
        "spec.tieredStorage: Value error, backend s3 needs an s3 section (with at least a bucket)",
        ".spec.tieredStorage: backend s3 needs an s3 section",
    ),
    "s3 without a bucket": (
        {"enabled": True, "backend": "s3", "s3": {"prefix": "p"}},
        "spec.tieredStorage.s3.bucket: Field required",
        "'bucket' is a required property",
    ),
    "posix without its section": (
        {"enabled": True, "backend": "posix"},
        "spec.tieredStorage: Value error, backend posix needs a posix section",
        ".spec.tieredStorage: backend posix needs a posix section",
    ),
    "posix without a path": (
        {"enabled": True, "posix": {"claimName": "tier"}},
        "spec.tieredStorage.posix.path: Field required",
        "'path' is a required property",
    ),
    "an upper-case bucket": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "Rocket-Tier"}},
        "spec.tieredStorage.s3.bucket: String should match pattern",
        "does not match",
    ),
    "a bucket too short": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "ab"}},
        "spec.tieredStorage.s3.bucket: String should have at least 3 characters",
        "is too short",
    ),
    "a bucket with adjacent dots": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "rocket..tier"}},
        "spec.tieredStorage.s3: Value error, bucket 'rocket..tier': no two adjacent dots",
        ".spec.tieredStorage.s3: bucket: no two adjacent dots",
    ),
    "a bucket like an IP address": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "192.168.5.4"}},
        "bucket '192.168.5.4': not formatted as an IP address",
        "bucket: not formatted as an IP address",
    ),
    "a reserved bucket prefix": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "xn--tier"}},
        "bucket 'xn--tier': S3 reserves the prefix xn--",
        "bucket: S3 reserves the prefixes",
    ),
    "a reserved bucket suffix": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "tier-s3alias"}},
        "bucket 'tier-s3alias': S3 reserves the suffix -s3alias",
        "bucket: S3 reserves the prefixes",
    ),
    "a prefix with a leading slash": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "tier", "prefix": "/prod"}},
        "spec.tieredStorage.s3.prefix: String should match pattern",
        "does not match",
    ),
    "an endpoint that is no URL": (
        {"enabled": True, "backend": "s3", "s3": {"bucket": "tier", "endpoint": "minio:9000"}},
        "spec.tieredStorage.s3.endpoint: String should match pattern",
        "does not match",
    ),
    "a batch below 4 KiB": (
        {"uploadBatchBytes": 4095},
        "spec.tieredStorage.uploadBatchBytes: Input should be greater than or equal to 4096",
        "4095 is less than the minimum of 4096",
    ),
    "a batch above 1 GiB": (
        {"uploadBatchBytes": (1 << 30) + 1},
        "spec.tieredStorage.uploadBatchBytes: Input should be less than or equal to 1073741824",
        "is greater than the maximum of 1073741824",
    ),
    "no upload interval": (
        {"uploadIntervalSeconds": 0},
        "spec.tieredStorage.uploadIntervalSeconds: Input should be greater than 0",
        "less than or equal to the minimum of 0",
    ),
    "a negative read-ahead": (
        {"readAheadBytes": -1},
        "spec.tieredStorage.readAheadBytes: Input should be greater than or equal to 0",
        "-1 is less than the minimum of 0",
    ),
    "a secret name Kubernetes refuses": (
        {"backend": "s3", "s3": {"bucket": "tier", "credentialsSecret": "Tier_Creds"}},
        "spec.tieredStorage.s3.credentialsSecret: String should match pattern",
        "does not match",
    ),
    "the options of the placeholder": (
        {"options": {"bucket": "tier"}},
        "spec.tieredStorage.options: Extra inputs are not permitted",
        "Additional properties are not allowed ('options' was unexpected)",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_name_the_field_and_the_reason(case: str, tmp_path: Path) -> None:
    tiered, model_says, crd_says = REFUSED[case]
    problems = _problems(tiered, tmp_path)
    assert len(problems) == 1 and model_says in problems[0], problems
    crd = crd_problems(_manifest(tiered))
    assert any(crd_says in p for p in crd), crd


def test_relative_posix_paths_are_for_local_mode_only() -> None:
    """rocketctl local resolves them against its --dir; in Kubernetes the path is a
    mount in the broker pods, so the CRD alone refuses it (and the pods' own mounts)."""
    relative = {"enabled": True, "posix": {"path": "tier"}}
    assert TieredStorageSpec.model_validate(relative).posix is not None
    assert crd_problems(_manifest(relative)) == [
        ".spec.tieredStorage.posix: path must be absolute in Kubernetes (where the broker "
        "pods mount the shared volume; a relative path is for rocketctl local)"
    ]
    for own in ("/var/lib/rocketcluster", "/tmp/", "/etc/rocketcluster"):
        problems = crd_problems(_manifest({"enabled": True, "posix": {"path": own}}))
        assert problems == [
            ".spec.tieredStorage.posix: path: the broker pods mount /etc/rocketcluster, "
            "/var/lib/rocketcluster, /tmp already"
        ], own


def test_the_broker_config_carries_the_spec_and_no_secret() -> None:
    tiered = TieredStorageSpec.model_validate(ISSUE_SHAPE)
    config = BrokerProcessConfig(
        cluster="prod",
        group="prod-broker-1",
        data_dir=Path("/data"),
        retention_hours=72,
        tiered_storage=tiered,
    )
    text = config.model_dump_json(by_alias=True)
    again = BrokerProcessConfig.model_validate_json(text)
    assert again.tiered_storage == tiered
    assert '"credentialsSecret":"tier-credentials"' in text  # the name, never a key
    assert "AWS_" not in text


def test_which_credentials_come_from_the_environment() -> None:
    with_secret = TieredStorageSpec.model_validate(ISSUE_SHAPE)
    assert s3_credential_env(with_secret) == {
        "AWS_ACCESS_KEY_ID": True,
        "AWS_SECRET_ACCESS_KEY": True,
        "AWS_SESSION_TOKEN": False,
    }
    identity = copy.deepcopy(ISSUE_SHAPE)
    del identity["s3"]["credentialsSecret"]
    assert s3_credential_env(TieredStorageSpec.model_validate(identity)) == {}
    off = copy.deepcopy(ISSUE_SHAPE) | {"enabled": False}
    assert s3_credential_env(TieredStorageSpec.model_validate(off)) == {}
    posix = copy.deepcopy(ISSUE_SHAPE) | {"backend": "posix"}
    assert s3_credential_env(TieredStorageSpec.model_validate(posix)) == {}


def test_the_model_is_frozen_like_its_neighbours() -> None:
    spec = TieredStorageSpec()
    with pytest.raises(ValidationError):
        spec.enabled = True
