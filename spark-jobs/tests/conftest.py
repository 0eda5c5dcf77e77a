"""One Spark session for the whole test session: it takes ~10 s to start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from rocketcluster.jobs.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session()
    yield session
    session.stop()
