"""The operated cluster of the e2e/k8s suite: once per backend (the emulator + pod
realiser here, which must work; a real cluster when one is configured, skipped saying
why when not — the one skip allowed-skips.toml allows)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocketcluster.ctl.testing import quiet_official_client
from rocketcluster.e2e.k8s.backends import BackendUnavailable, EmulatedBackend, open_backend
from rocketcluster.e2e.k8s.operated import OperatedCluster

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "examples" / "cluster.yaml"
CATALOGUE = REPO / "examples" / "catalogue.yaml"


@contextlib.contextmanager
def operated(make: Callable[[], EmulatedBackend]) -> Iterator[OperatedCluster]:
    """The cluster ``prod`` on the emulated backend ``make`` opens, both closed after;
    a backend that cannot start fails the test saying why."""
    try:
        backend = make()
    except BackendUnavailable as exc:
        pytest.fail(f"emulated backend: {exc}")
    cluster = OperatedCluster(backend, "prod")
    try:
        yield cluster
    finally:
        cluster.close()
        backend.close()


def with_canary(directory: Path) -> Path:
    """examples/cluster.yaml with its canary on (spec.canary): what the journey runs."""
    doc = yaml.safe_load(MANIFEST.read_text())
    doc["spec"]["canary"] = {"enabled": True, "intervalSeconds": 2}
    path = directory / "cluster-with-canary.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def one_group(directory: Path, change: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """examples/cluster.yaml with one broker group (three replicas, sync 2 of 3) and
    its three controllers: the same shape, half the pods; ``change`` edits the spec."""
    doc = yaml.safe_load(MANIFEST.read_text())
    doc["spec"]["brokers"]["groups"] = 1
    if change is not None:
        change(doc["spec"])
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class Journey:
    """The suite is one user's journey through a cluster's life; a step that failed
    makes the steps after it fail at once, saying which step they needed, rather than
    run into its consequences."""

    def __init__(self, cluster: OperatedCluster) -> None:
        self.cluster = cluster
        self.done: set[str] = set()
        self.on_new_group: list[str] = []  # ids produced to the group scale-in removes

    def needs(self, *steps: str) -> OperatedCluster:
        missing = [s for s in steps if s not in self.done]
        if missing:
            pytest.fail(f"not run: needs the step(s) {', '.join(missing)}, which did not succeed")
        return self.cluster


@pytest.fixture(scope="module", params=["emulated", "real"])
def journey(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Journey]:
    quiet_official_client()
    kind = str(request.param)
    try:
        backend = open_backend(kind, tmp_path_factory.mktemp(f"k8s-{kind}"), REPO / "crds")
    except BackendUnavailable as exc:
        if kind == "real":  # allowed-skips.toml: no real cluster exists here
            pytest.skip(f"{kind} backend: {exc}")
        pytest.fail(f"{kind} backend: {exc}")
    cluster = OperatedCluster(backend, "prod")
    try:
        yield Journey(cluster)
    finally:
        cluster.close()
        backend.close()
