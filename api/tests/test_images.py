"""Which images a controller member and the health reports run when the manifest
names only the brokers'."""

from __future__ import annotations

import pytest

from rocketcluster.api.cluster import (
    RocketClusterSpec,
    controller_image_for,
    spark_jobs_image_for,
)


@pytest.mark.parametrize(
    ("broker", "controller"),
    [
        (
            "ghcr.io/rocketcluster/rocketcluster-broker:0.1.0",
            "ghcr.io/rocketcluster/rocketcluster-controller:0.1.0",
        ),
        ("localhost:5000/rocketcluster-broker:dev", "localhost:5000/rocketcluster-controller:dev"),
        ("rocketcluster-broker", "rocketcluster-controller"),
        # Not one of ours, or pinned by digest: used as it is.
        ("ghcr.io/acme/messaging:2.0", "ghcr.io/acme/messaging:2.0"),
        ("ghcr.io/rocketcluster/rocketcluster-broker@sha256:" + "a" * 64, None),
        ("ghcr.io/rocketcluster/rocketcluster-brokers:1", None),
    ],
)
def test_controller_twin(broker: str, controller: str | None) -> None:
    assert controller_image_for(broker) == (controller or broker)


def test_an_explicit_controller_image_wins() -> None:
    spec = RocketClusterSpec.model_validate(
        {"image": "ghcr.io/rocketcluster/rocketcluster-broker:1", "controller": {"image": "c:2"}}
    )
    assert spec.controller_image() == "c:2"
    assert RocketClusterSpec().controller_image().endswith("/rocketcluster-controller:0.1.0")


@pytest.mark.parametrize(
    ("broker", "spark"),
    [
        (
            "ghcr.io/rocketcluster/rocketcluster-broker:0.1.0",
            "ghcr.io/rocketcluster/rocketcluster-spark-jobs:0.1.0",
        ),
        ("localhost:5000/rocketcluster-broker:dev", "localhost:5000/rocketcluster-spark-jobs:dev"),
        ("rocketcluster-broker", "rocketcluster-spark-jobs"),
        # A broker image carries no Java or Spark: never its own twin.
        ("ghcr.io/acme/messaging:2.0", None),
        ("ghcr.io/rocketcluster/rocketcluster-broker@sha256:" + "a" * 64, None),
    ],
)
def test_spark_jobs_twin(broker: str, spark: str | None) -> None:
    assert spark_jobs_image_for(broker) == spark


def test_the_health_reports_image_is_the_given_one_or_the_twin() -> None:
    released = RocketClusterSpec.model_validate({"healthReports": {}})
    assert released.health_reports_image().endswith("/rocketcluster-spark-jobs:0.1.0")
    own = RocketClusterSpec.model_validate(
        {"image": "acme/broker:1", "healthReports": {"image": "acme/spark:1"}}
    )
    assert own.health_reports_image() == "acme/spark:1"
