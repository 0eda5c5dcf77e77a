"""The store's Prometheus metrics (metrics.register_store_metrics) on a real store:
what each family says after real writes, reads, flushes and retention, and that the
exposition passes ``promtool check metrics``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rocketcluster.broker.metrics import FLUSH_BUCKETS, BrokerMetrics, register_store_metrics
from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore
from rocketcluster.ctl.testing import small_store_config

from .conftest import COLD_ATTEMPTS, NO_NOWAIT, evict

BASE = {"cluster": "c1", "node_type": "broker", "node_id": "g-0"}
HOUR = 3600.0


def put_message(i: int) -> MessageToStore:
    return MessageToStore.build("orders", 0, f"body-{i}".encode() * 40, msg_id=f"ID{i:030d}")


class Scrape:
    """One rendering of the registry, parsed back."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.text = metrics.render().decode()
        self.families = {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self, name: str) -> list[Sample]:
        family = next(
            (f for f in self.families.values() if any(s.name == name for s in f.samples)),
            None,
        )
        return [] if family is None else [s for s in family.samples if s.name == name]

    def value(self, name: str, **labels: str) -> float:
        found = [s.value for s in self.samples(name) if s.labels == {**BASE, **labels}]
        assert len(found) == 1, f"{name}{labels}: {found} in\n{self.text}"
        return found[0]

    def kind(self, family: str) -> str:
        return self.families[family].type


async def open_measured(root: Path, **overrides: object) -> tuple[MessageStore, BrokerMetrics]:
    store = await MessageStore.open(small_store_config(root, **overrides))
    metrics = BrokerMetrics(BASE["cluster"], BASE["node_id"])
    register_store_metrics(metrics, store)
    return store, metrics


@pytest.fixture
async def measured(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, BrokerMetrics]]:
    store, metrics = await open_measured(tmp_path / "store", retention_hours=1.0)
    try:
        yield store, metrics
    finally:
        await store.close()


async def test_one_flush_latency_observation_per_fsync_not_per_message(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    results = await asyncio.gather(*(store.put(put_message(i)) for i in range(200)))
    assert all(r.ok for r in results)
    scrape = Scrape(metrics)
    assert scrape.kind("rocketmq_storage_flush_latency") == "histogram"
    count = scrape.value("rocketmq_storage_flush_latency_count", flush_type="sync")
    assert count == store.flush_service.fsync_count
    assert 1 <= count <= 200
    assert scrape.value("rocketmq_storage_flush_latency_sum", flush_type="sync") > 0
    buckets = [
        float(s.labels["le"])
        for s in scrape.samples("rocketmq_storage_flush_latency_bucket")
        if s.labels["flush_type"] == "sync"
    ]
    assert buckets == [*map(float, FLUSH_BUCKETS), float("inf")]


async def test_async_flushes_are_labelled_async(tmp_path: Path) -> None:
    store, metrics = await open_measured(tmp_path / "store", flush=FlushMode.ASYNC)
    try:
        assert (await store.put(put_message(1))).ok
        await store.flush()
        scrape = Scrape(metrics)
        count = scrape.value("rocketmq_storage_flush_latency_count", flush_type="async")
        assert count == store.flush_service.fsync_count >= 1
        assert not [
            s
            for s in scrape.samples("rocketmq_storage_flush_latency_count")
            if s.labels["flush_type"] == "sync"
        ]
    finally:
        await store.close()


async def test_disk_gauges_describe_the_stores_volume(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    scrape = Scrape(metrics)
    st = os.statvfs(store.config.root_dir)
    total = scrape.value("rocketmq_storage_disk_total_bytes")
    free = scrape.value("rocketmq_storage_disk_free_bytes")
    assert total == st.f_blocks * st.f_frsize
    assert 0 < free <= total


async def test_oldest_message_age_is_absent_on_an_empty_log_then_follows_the_head(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    assert Scrape(metrics).samples("rocketmq_storage_oldest_message_age") == []
    for i in range(120):
        assert (await store.put(put_message(i))).ok
    first = store.get_messages("orders", 0, 0, 1).messages[0]
    before = time.time()
    age = Scrape(metrics).value("rocketmq_storage_oldest_message_age")
    after = time.time()
    assert before - first.store_timestamp / 1000 <= age <= after - first.store_timestamp / 1000

    await store.checkpoint()
    old = time.time() - 5 * HOUR
    for seg in store.commitlog.segments[:2]:
        os.utime(seg.path, (old, old))
    assert store.apply_retention().delete_count == 2
    lo, _ = store.queue_offsets("orders", 0)
    head = store.get_messages("orders", 0, lo, 1).messages[0]
    assert head.physical_offset == store.commitlog.min_offset
    before = time.time()
    age = Scrape(metrics).value("rocketmq_storage_oldest_message_age")
    after = time.time()
    assert before - head.store_timestamp / 1000 <= age <= after - head.store_timestamp / 1000


async def test_retention_counts_the_bytes_it_deleted_and_shows_its_setting(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    scrape = Scrape(metrics)
    assert scrape.kind("rocketmq_storage_retention_deleted_bytes") == "counter"
    assert scrape.value("rocketmq_storage_retention_deleted_bytes_total") == 0
    assert scrape.value("rocketmq_storage_retention_seconds") == 3600.0
    for i in range(120):
        assert (await store.put(put_message(i))).ok
    await store.checkpoint()
    old = time.time() - 5 * HOUR
    for seg in store.commitlog.segments[:3]:
        os.utime(seg.path, (old, old))
    assert store.apply_retention().delete_count == 3
    deleted = Scrape(metrics).value("rocketmq_storage_retention_deleted_bytes_total")
    assert deleted == 3 * store.commitlog.segment_size


async def test_expired_messages_nobody_read_are_counted_deleted_unconsumed(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    scrape = Scrape(metrics)
    assert scrape.kind("rocketmq_storage_deleted_unconsumed_messages") == "counter"
    assert scrape.value("rocketmq_storage_deleted_unconsumed_messages_total") == 0
    assert scrape.value("rocketmq_storage_retention_held_for_consumers_segments") == 0
    assert scrape.value("rocketmq_storage_disk_full_ratio") == store.config.disk_full_ratio
    for i in range(120):
        assert (await store.put(put_message(i))).ok
    first = store.queue_offsets("orders", 0)[0]
    store.metadata.commit_offset("g", "orders", 0, first + 5)  # g read 5 of them
    await store.checkpoint()
    old = time.time() - 5 * HOUR
    for seg in store.commitlog.segments[:3]:
        os.utime(seg.path, (old, old))
    assert store.apply_retention().delete_count == 3
    removed = store.queue_offsets("orders", 0)[0] - first
    assert removed > 5
    # Expired: deleted whoever needed them; the 5 g had consumed do not count.
    assert Scrape(metrics).value("rocketmq_storage_deleted_unconsumed_messages_total") == (
        removed - 5
    )


async def test_page_cache_reads_count_consumer_reads_by_result(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    store, metrics = measured
    if not store.commitlog.page_cache.supported:
        scrape = Scrape(metrics)
        assert scrape.samples("rocketmq_storage_page_cache_reads_total") == []
        pytest.fail(NO_NOWAIT)
    for i in range(40):
        assert (await store.put(put_message(i))).ok
    await store.flush()
    # An evicted page's cache-only read still starts its I/O; a fast disk may finish it
    # before the read looks, and the pass is all hits (seen in a full make test, as in
    # test_page_cache.py). Such a pass is tried again; each must count 16 reads.
    # A pass right after another can meet the same burst of load (all ten passes of a
    # fresh make test were hits): they are spaced as test_page_cache.py's are.
    hits = misses = 0.0
    for attempt in range(COLD_ATTEMPTS):
        await asyncio.sleep(0.1 * attempt)
        for seg in store.commitlog.segments:
            evict(seg.fd)
        assert len(store.get_messages("orders", 0, 0, 16).messages) == 16
        scrape = Scrape(metrics)
        assert scrape.kind("rocketmq_storage_page_cache_reads") == "counter"
        now_hits = scrape.value("rocketmq_storage_page_cache_reads_total", result="hit")
        now_misses = scrape.value("rocketmq_storage_page_cache_reads_total", result="miss")
        assert (now_hits - hits) + (now_misses - misses) == 16
        cold_pass_missed = now_misses > misses
        hits, misses = now_hits, now_misses
        if cold_pass_missed:
            break
    assert misses >= 1
    Scrape(metrics)  # scraping reads the log too, but counts nothing
    assert len(store.get_messages("orders", 0, 0, 16).messages) == 16
    scrape = Scrape(metrics)
    assert scrape.value("rocketmq_storage_page_cache_reads_total", result="hit") == hits + 16
    assert scrape.value("rocketmq_storage_page_cache_reads_total", result="miss") == misses


async def test_the_exposition_passes_promtool_except_the_contracted_hours_name(
    measured: tuple[MessageStore, BrokerMetrics],
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `make debs` installs Debian's prometheus package")
    store, metrics = measured
    for i in range(20):
        assert (await store.put(put_message(i))).ok
    store.get_messages("orders", 0, 0, 5)
    metrics.produced("orders", 20, 2000)
    metrics.observe_rpc("SendMessage", 20000, 0.002)
    checked = await asyncio.to_thread(
        subprocess.run,
        [promtool, "check", "metrics"],
        input=metrics.render(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    problems = (checked.stdout + checked.stderr).decode().strip().splitlines()
    assert problems == [], problems
