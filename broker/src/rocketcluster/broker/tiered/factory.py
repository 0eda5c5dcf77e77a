"""The backend a manifest's ``tieredStorage`` names."""

from __future__ import annotations

from pathlib import Path

from rocketcluster.api.tiered_spec import TieredBackend, TieredStorageSpec
from rocketcluster.broker.tiered.backend import TierBackend


def backend_from_spec(spec: TieredStorageSpec) -> TierBackend:
    """A POSIX directory or an S3 bucket; S3 credentials come from the process's
    environment (the operator maps the manifest's Secret to AWS_* variables)."""
    if spec.backend is TieredBackend.S3:
        if spec.s3 is None:
            raise ValueError("tieredStorage.backend is s3 but there is no s3 section")
        from rocketcluster.broker.tiered.s3 import S3Backend  # boto3 only when used

        return S3Backend(
            spec.s3.bucket, prefix=spec.s3.prefix, endpoint=spec.s3.endpoint, region=spec.s3.region
        )
    if spec.posix is None:
        raise ValueError("tieredStorage.backend is posix but there is no posix section")
    from rocketcluster.broker.tiered.posix import PosixBackend

    return PosixBackend(Path(spec.posix.path))
