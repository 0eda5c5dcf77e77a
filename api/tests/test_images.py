"""Which image a controller member runs when the manifest names only the brokers'."""

from __future__ import annotations

import pytest

from rocketcluster.api.cluster import RocketClusterSpec, controller_image_for


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
