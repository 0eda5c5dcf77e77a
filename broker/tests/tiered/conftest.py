"""Fixtures for the tier's backends: a real S3 endpoint (moto behind a gate, shared by
the session) and a fresh bucket per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rocketcluster.broker.tiered.s3 import S3Backend
from rocketcluster.e2e.s3server import S3Server, running_s3_server

MakeS3 = Callable[..., S3Backend]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


def s3_backend_for(server: S3Server, bucket: str, **options: Any) -> S3Backend:
    """An :class:`S3Backend` on ``server`` with short timeouts, so an outage shows in
    a second, not in boto3's default minute."""
    settings: dict[str, Any] = {
        "endpoint": server.endpoint,
        "region": server.region,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "connect_timeout": 2.0,
        "read_timeout": 10.0,
        "max_attempts": 2,
        **options,
    }
    return S3Backend(bucket, **settings)


def new_bucket(server: S3Server) -> str:
    name = f"tier-{uuid.uuid4().hex[:16]}"
    server.create_bucket(name)
    return name


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    return new_bucket(s3_server)


@pytest.fixture
def make_s3(s3_server: S3Server, s3_bucket: str) -> MakeS3:
    """Backends on this test's bucket (``make_s3(prefix="x", part_size=...)``)."""

    def make(**options: Any) -> S3Backend:
        return s3_backend_for(s3_server, s3_bucket, **options)

    return make
