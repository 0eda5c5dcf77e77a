"""The in-process store cases: produce at saturation, and cold reads.

Produce in-process, the store at saturation (the worst case): an in-process store (async
flush, 1 KiB bodies, 8 queues, batches of 32 per put, several concurrent writers) for
``seconds``, with no tier, with a tier uploading to a POSIX directory, and with a tier
uploading to S3. The tier runs as in a broker (``start()``, master) with a short upload
interval so it uploads while the producer runs (the timed run starts once its first
upload is done, after an untimed warm-up), except that it writes segments on
threads of this process (a broker has a worker process for that: this case shows the
cost the worker process keeps off the broker's loop); how much it uploaded by the end of the
run is reported (an uploader that uploaded nothing would cost nothing), then it catches
up on what is left and the time that took is reported too. Slowdown: 1 - tier / none;
an uploader that fell behind (uploaded little during the run) cost less than keeping up
would, so read the slowdown beside the share it uploaded. The event loop turns between
puts and between reads, as between a broker's requests: the tier's task and its
read-ahead get the turns they would get there. A bare store at saturation spends ~10 µs
of Python per record, so the uploader's few µs per record weigh far more here than in a
broker, which spends most of its time on gRPC and protobuf (DESIGN §9).

Cold reads: ``messages`` 1 KiB messages written once and uploaded to both tiers, then
every message of every queue read ``read_batch`` at a time: locally through the consume
queues (``get_messages``) with the store's files dropped from the page cache, from the
POSIX tier (its files dropped from the page cache too) and from S3 through a new
catalogue, read-ahead cache and ``TierReader`` each time (what a replica that never read
the data has), and locally again with a warm page cache, for reference.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketcluster.api.tiered_spec import TieredStorageSpec
from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig
from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.cache import SegmentCache
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.broker.tiered.reader import TierReader
from rocketcluster.broker.tiered.service import TieredStorage
from rocketcluster.ctl.bench.tier.backends import Backends, delete_uploads
from rocketcluster.ctl.bench.tier.medians import median, summarize_runs
from rocketcluster.ctl.bench.tier.settings import (
    BUCKET,
    CLUSTER,
    PUT_BATCH,
    QUEUES,
    READ_AHEAD_BYTES,
    RECORD_BODY,
    TOPIC,
    WARMUP_UPLOAD_TIMEOUT_S,
    TierSettings,
)

SEGMENT_SIZE = 256 << 20


def _pool(count: int = 4096) -> list[MessageToStore]:
    body = os.urandom(RECORD_BODY)
    return [
        MessageToStore.build(TOPIC, i % QUEUES, body, msg_id=f"{i:032X}", keys=(f"k{i}",))
        for i in range(count)
    ]


def _store_config(root: Path) -> StoreConfig:
    return StoreConfig(root_dir=root, flush=FlushMode.ASYNC, segment_size=SEGMENT_SIZE)


def _spec(kind: str, settings: TierSettings) -> TieredStorageSpec:
    where: dict[str, object] = (
        {"posix": {"path": "/unused"}}  # the backend is made here, not from the spec
        if kind == "posix"
        else {"s3": {"bucket": BUCKET}}
    )
    return TieredStorageSpec.model_validate(
        {
            "enabled": True,
            "backend": kind,
            **where,
            "uploadBatchBytes": settings.upload_batch_bytes,
            "uploadIntervalSeconds": settings.upload_interval_s,
            "readAheadBytes": settings.read_ahead_bytes,
        }
    )


def _tier(
    kind: str, store: MessageStore, backend: TierBackend, group: str, settings: TierSettings
) -> TieredStorage:
    return TieredStorage(
        _spec(kind, settings),
        store,
        backend,
        cluster=CLUSTER,
        group=group,
        writer="bench",
        is_master=lambda: True,
    )


async def _put_all(store: MessageStore, pool: list[MessageToStore], start: int, n: int) -> None:
    batch = [pool[(start + k) % len(pool)] for k in range(n)]
    result = await store.put_batch(batch)
    if not result.ok:
        raise RuntimeError(f"put failed: {result.status} {result.reason}")


# -- produce ------------------------------------------------------------------------


async def produce_case(
    root: Path,
    seconds: float,
    *,
    writers: int = 8,
    tier: tuple[str, TierBackend] | None = None,
    settings: TierSettings | None = None,
) -> dict[str, Any]:
    """Put batches of 32 from ``writers`` writers for ``seconds`` (with a tier, until
    an upload finished too), with a running tier uploading to ``tier`` (kind, backend)
    or none; then let the tier catch up. Rates are over the run's measured length."""
    settings = settings or TierSettings()
    store = await MessageStore.open(_store_config(root))
    tiered: TieredStorage | None = None
    try:
        if tier is not None:
            tiered = _tier(tier[0], store, tier[1], root.name, settings)
            store.attach_tier(tiered)
            # A broker's tier has its backend client made and its catalogue read long
            # before: do that (the S3 client costs half a second of CPU) untimed.
            await tiered.refresh()
            # The uploader's writes on threads of this process, beside the store: the
            # cost a broker's worker process keeps off its loop (the broker case has it).
            tiered.start(worker_process=False)
        pool = _pool()

        async def write_until(done: Callable[[], bool]) -> int:
            """Put from ``writers`` writers until ``done()``; the records put."""
            count = 0

            async def writer(w: int) -> None:
                nonlocal count
                i = w * 97
                while not done():
                    await _put_all(store, pool, i, PUT_BATCH)
                    i += PUT_BATCH
                    count += PUT_BATCH
                    # The loop turns between puts, as between a broker's requests:
                    # dispatch, flush and the tier get their turns as they would there.
                    await asyncio.sleep(0)

            await asyncio.gather(*(writer(w) for w in range(writers)))
            return count

        warm = 0
        if tiered is not None:
            # Untimed, until the uploader's first upload is done (at most
            # WARMUP_UPLOAD_TIMEOUT_S): the timed run then measures it at work, not its
            # first write, which a busy machine can delay past a short run.
            warm_until = time.perf_counter() + WARMUP_UPLOAD_TIMEOUT_S
            warm = await write_until(
                lambda: _uploaded(tiered)[1] > 0 or time.perf_counter() > warm_until
            )
        before = _uploaded(tiered)
        offset_before = store.commitlog.write_offset
        started = time.perf_counter()
        deadline = started + seconds
        # With a tier the run lasts until an upload has also finished in it (at most
        # WARMUP_UPLOAD_TIMEOUT_S more): on a starved machine a short run can end
        # before the uploader's next write does, and would then measure the store alone.
        last_call = deadline + WARMUP_UPLOAD_TIMEOUT_S

        def run_over() -> bool:
            now = time.perf_counter()
            if now < deadline:
                return False
            return tiered is None or _uploaded(tiered)[1] > before[1] or now > last_call

        count = await write_until(run_over)
        during = _uploaded(tiered)
        await store.flush()
        elapsed = time.perf_counter() - started
        written = store.commitlog.write_offset - offset_before
        row: dict[str, Any] = {
            "records": count,
            "bytes": written,
            "seconds": elapsed,
            "records_per_s": count / elapsed,
            "mb_per_s": written / elapsed / 1e6,
        }
        if tiered is not None:
            row.update(await _catch_up(tiered, before, during, warm + count, elapsed))
        return row
    finally:
        if tiered is not None:
            await tiered.stop()
        await store.close()


def _uploaded(tier: TieredStorage | None) -> tuple[int, int, int, float]:
    """(bytes, segments, messages, seconds in backend writes) uploaded so far."""
    if tier is None:
        return 0, 0, 0, 0.0
    up = tier.uploader.counters
    return up.bytes, up.segments, up.messages, up.seconds


async def _catch_up(
    tier: TieredStorage,
    before: tuple[int, int, int, float],
    during: tuple[int, int, int, float],
    records: int,
    elapsed: float,
) -> dict[str, Any]:
    """Stop the tier's task, upload what is left, and check that the tier holds every
    record; what the uploader did during the run and what was left for after."""
    await tier.stop()  # a write cut short here is adopted by the flush below
    started = time.perf_counter()
    await tier.flush()
    catch_up_s = time.perf_counter() - started
    in_tier = sum(s.count for queue in tier.catalog for s in queue.segments)
    if in_tier != records or tier.uploader.pending():
        raise RuntimeError(f"the tier holds {in_tier} of {records} records after a flush")
    up_bytes, segments, messages, write_s = (d - b for d, b in zip(during, before, strict=True))
    return {
        "uploaded_bytes_during_run": up_bytes,
        "uploaded_segments_during_run": segments,
        "uploaded_messages_during_run": messages,
        # of everything written by the end of the run, warm-up included
        "uploaded_fraction_during_run": during[2] / records if records else 0.0,
        "upload_write_seconds_during_run": write_s,
        "catch_up_seconds": catch_up_s,
        # stored and uploaded: the records over the run and the catch-up after it
        "tiered_records_per_s": records / (elapsed + catch_up_s),
        "segments_in_tier": sum(len(queue.segments) for queue in tier.catalog),
    }


async def run_produce(
    base: Path,
    backends: Backends,
    kinds: list[str],
    seconds: float,
    reps: int,
    writers: int,
    settings: TierSettings,
) -> list[dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ["none", *kinds]}
    for rep in range(reps):
        for kind, results in runs.items():  # interleaved: none, posix, s3, none, ...
            name = f"produce-{kind}-{rep}"
            backend = None if kind == "none" else backends.make(kind, name)
            try:
                results.append(
                    await produce_case(
                        base / name,
                        seconds,
                        writers=writers,
                        tier=None if backend is None else (kind, backend),
                        settings=settings,
                    )
                )
            finally:
                shutil.rmtree(base / name, ignore_errors=True)
                if backend is not None:
                    await asyncio.to_thread(delete_uploads, backend, name)
    rows = []
    baseline = runs["none"]
    for kind, results in runs.items():
        row = {"case": kind, **summarize_runs(results, "records_per_s")}
        if kind != "none":
            row["slowdown"] = 1 - row["records_per_s"] / median(
                [r["records_per_s"] for r in baseline]
            )
            row["runs_slowdown"] = [
                round(1 - r["records_per_s"] / b["records_per_s"], 3)
                for r, b in zip(results, baseline, strict=True)
            ]
            row["uploaded_fraction_during_run"] = median(
                [r["uploaded_fraction_during_run"] for r in results]
            )
        rows.append(row)
    return rows


# -- cold reads ---------------------------------------------------------------------


class _NoValues:
    """A catalogue that keeps no local copy: it learns the tier from the backend."""

    def put_values(self, values: dict[str, object]) -> None:
        return

    def values_with_prefix(self, prefix: str) -> dict[str, object]:
        return {}


async def write_messages(store: MessageStore, messages: int, writers: int = 8) -> int:
    """``messages`` 1 KiB messages in batches of 32; returns the commit-log bytes, once
    every one of them is in its consume queue."""
    pool = _pool()
    per_writer = -(-messages // (writers * PUT_BATCH)) * PUT_BATCH

    async def writer(w: int) -> None:
        first = w * per_writer
        for start in range(first, min(messages, first + per_writer), PUT_BATCH):
            await _put_all(store, pool, start, min(PUT_BATCH, messages - start))

    await asyncio.gather(*(writer(w) for w in range(writers)))
    await store.flush()
    for _ in range(500):
        if sum(store.queue_offsets(TOPIC, q)[1] for q in range(QUEUES)) >= messages:
            break
        await asyncio.sleep(0.01)
    else:
        raise RuntimeError("the consume queues did not catch up with the commit log")
    return store.commitlog.write_offset


def drop_page_cache(root: Path) -> bool:
    """Write back and drop every file below ``root`` from the page cache (no root
    rights needed: ``posix_fadvise(DONTNEED)``); False where that is not possible."""
    advise = getattr(os, "posix_fadvise", None)
    dontneed = getattr(os, "POSIX_FADV_DONTNEED", None)
    if advise is None or dontneed is None:
        return False
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            advise(fd, 0, 0, dontneed)
        finally:
            os.close(fd)
    return True


async def read_local(store: MessageStore, batch: int) -> dict[str, Any]:
    """Every message of every queue through the consume queues, ``batch`` at a time
    (the loop turns between reads, as between a broker's receives)."""
    cache = store.commitlog.page_cache
    hits, misses = cache.hits, cache.misses
    count = 0
    started = time.perf_counter()
    for qid in range(QUEUES):
        offset, hi = store.queue_offsets(TOPIC, qid)
        while offset < hi:
            got = store.get_messages(TOPIC, qid, offset, batch)
            if not got.messages or got.messages[0].queue_offset != offset:
                raise RuntimeError(f"local read of {TOPIC}/{qid}@{offset} got {got.status}")
            count += len(got.messages)
            offset = got.next_offset
            await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    return {
        "messages": count,
        "seconds": elapsed,
        "page_cache_hits": cache.hits - hits,
        "page_cache_misses": cache.misses - misses,
    }


async def read_tier(
    backend: TierBackend, group: str, batch: int, read_ahead_bytes: int = READ_AHEAD_BYTES
) -> dict[str, Any]:
    """Every message of every queue from the tier, through a new catalogue (learnt from
    the backend, not timed), an empty read-ahead cache and a new reader."""
    catalog = TierCatalog(backend, CLUSTER, group, _NoValues())
    await asyncio.to_thread(catalog.refresh)
    cache = SegmentCache(read_ahead_bytes)
    reader = TierReader(catalog, backend, cache)
    count = 0
    try:
        started = time.perf_counter()
        for qid in range(QUEUES):
            queue = catalog.get(TOPIC, qid)
            if queue is None or queue.start is None or queue.end is None:
                continue
            offset = queue.start
            while offset < queue.end:
                got = await reader.read(TOPIC, qid, offset, batch)
                if not got or got[0].queue_offset != offset:
                    raise RuntimeError(f"tier read of {TOPIC}/{qid}@{offset} got {len(got)}")
                count += len(got)
                offset += len(got)
                # The loop turns between reads, as between a broker's receives (the
                # read-ahead runs as a task: it needs those turns).
                await asyncio.sleep(0)
        elapsed = time.perf_counter() - started
    finally:
        await reader.close()
    rd = reader.counters
    return {
        "messages": count,
        "seconds": elapsed,
        "segments": sum(len(q.segments) for q in catalog),
        "fetches": rd.fetches,
        "fetched_bytes": rd.fetched_bytes,
        "cache_hits": cache.hits,
        "cache_misses": cache.misses,
    }


async def run_reads(
    base: Path,
    backends: Backends,
    kinds: list[str],
    messages: int,
    reps: int,
    batch: int,
    settings: TierSettings,
) -> dict[str, Any]:
    root = base / "read-store"
    store = await MessageStore.open(_store_config(root))
    tiers: dict[str, TierBackend] = {}
    try:
        written = await write_messages(store, messages)
        uploads = {}
        for kind in kinds:
            tiers[kind] = backends.make(kind, "read")
            tier = _tier(kind, store, tiers[kind], f"read-{kind}", settings)
            started = time.perf_counter()
            segments = await tier.flush()
            uploads[kind] = {
                "segments": segments,
                "bytes": tier.uploader.counters.bytes,
                "messages": tier.uploader.counters.messages,
                "seconds": time.perf_counter() - started,
            }
            await tier.stop()
            if tier.uploader.counters.messages != messages:
                raise RuntimeError(f"{kind}: uploaded {tier.uploader.counters.messages} messages")
        runs: dict[str, list[dict[str, Any]]] = {
            case: [] for case in ["local", *kinds, "local-warm"]
        }
        dropped = {}
        for _ in range(reps):
            for case, results in runs.items():
                if case == "local":
                    dropped[case] = drop_page_cache(root)
                    got = await read_local(store, batch)
                elif case == "local-warm":
                    got = await read_local(store, batch)
                else:
                    if isinstance(tiers[case], PosixBackend):
                        dropped[case] = drop_page_cache(base / "posix")
                    got = await read_tier(
                        tiers[case], f"read-{case}", batch, settings.read_ahead_bytes
                    )
                if got["messages"] != messages:
                    raise RuntimeError(f"{case} read {got['messages']} of {messages} messages")
                got["messages_per_s"] = got["messages"] / got["seconds"]
                got["mb_per_s"] = written / got["seconds"] / 1e6
                results.append(got)
        rows = []
        local = median([r["messages_per_s"] for r in runs["local"]])
        for case, results in runs.items():
            row = {"case": case, **summarize_runs(results, "messages_per_s")}
            row["ratio_to_local"] = row["messages_per_s"] / local
            if case in dropped:
                row["page_cache_dropped"] = dropped[case]
            rows.append(row)
        return {"bytes": written, "messages": messages, "uploads": uploads, "cases": rows}
    finally:
        await store.close()
        shutil.rmtree(root, ignore_errors=True)
        for kind, backend in tiers.items():
            await asyncio.to_thread(delete_uploads, backend, kind)
