"""The garbage collector's pauses as a metric, and the broker process's settings
(rocketcluster.broker.collector): real collections, observed and exposed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocketcluster.broker.collector import (
    THRESHOLDS,
    PauseObserver,
    freeze_survivors,
    tune_collector,
)
from rocketcluster.broker.metrics import BrokerMetrics


@pytest.fixture
def collector_settings() -> Iterator[None]:
    """The test process's own collector, as it was, afterwards."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_each_collection_is_observed_with_its_generation_until_uninstalled() -> None:
    seen: list[tuple[int, float]] = []
    observer = PauseObserver(lambda generation, seconds: seen.append((generation, seconds)))
    observer.install()
    observer.install()  # once, however often installed
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        observer.uninstall()
    assert {0, 2} <= {g for g, _ in seen}  # (and any the allocations here started)
    assert all(0 <= s < 10 for _, s in seen)
    observed = len(seen)
    gc.collect()
    assert len(seen) == observed  # not observed once uninstalled
    observer.uninstall()  # harmless twice


def test_the_pauses_are_a_histogram_per_generation_in_the_exposition() -> None:
    metrics = BrokerMetrics("c1", "g-0")
    observer = PauseObserver(metrics.observe_gc)
    observer.install()
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        observer.uninstall()
    samples = {
        (sample.name, sample.labels["generation"]): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "rocketcluster_python_gc_pause_seconds"
        for sample in family.samples
        if "le" not in sample.labels
    }
    for generation in ("1", "2"):
        assert samples[("rocketcluster_python_gc_pause_seconds_count", generation)] >= 1
        assert 0 <= samples[("rocketcluster_python_gc_pause_seconds_sum", generation)] < 10


@pytest.mark.usefixtures("collector_settings")
def test_the_process_settings_make_young_collections_rarer_and_spare_the_survivors() -> None:
    tune_collector()
    assert gc.get_threshold() == THRESHOLDS
    kept = [[i] for i in range(10_000)]  # alive at the freeze
    freeze_survivors()
    assert gc.get_freeze_count() >= len(kept)
    before = gc.get_freeze_count()
    later = [[i] for i in range(1_000)]  # born after it: collected as usual
    assert gc.get_freeze_count() <= before  # (frozen objects freed meanwhile count down)
    assert gc.is_tracked(later[0])
