"""Store benchmark: append and read throughput of 1 KiB records, each beside the
physical limit measured in the same run with the same bytes.

Store put: flush async and sync, 1 / 8 / 64 concurrent writers, one record per put and
batches of 32 per put (what a client sending several messages per request gets); this
includes building consume queues and the index. Commit-log append: the bare append
path (encode, pwritev, fdatasync every ``flush_bytes``) in batches of 32.
Physical limit: the same number of bytes written in 1 MiB chunks with the same fsync
policy (async: fdatasync every ``flush_bytes``; sync: fdatasync after every chunk).
The machine is shared and noisy: each case runs twice and its raw limit three times,
interleaved, and the medians are compared.
Read: every record read back through the consume queues and straight from the commit
log, beside reading the same segment files in 1 MiB chunks.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig
from rocketcluster.broker.store.commitlog import CommitLog

RECORD_BODY = 1024
CHUNK = 1 << 20
QUEUES = 8


@dataclass(frozen=True)
class AppendCase:
    flush: FlushMode
    writers: int
    batch: int
    seconds: float


def _messages(count: int) -> list[MessageToStore]:
    body = os.urandom(RECORD_BODY)
    return [
        MessageToStore.build("bench", i % QUEUES, body, msg_id=f"{i:032X}", keys=(f"k{i}",))
        for i in range(count)
    ]


def _config(root: Path, flush: FlushMode) -> StoreConfig:
    return StoreConfig(root_dir=root, flush=flush, segment_size=256 << 20)


async def _append(root: Path, case: AppendCase) -> dict[str, Any]:
    store = await MessageStore.open(_config(root, case.flush))
    pool = _messages(4096)
    count = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + case.seconds

    async def writer(w: int) -> None:
        nonlocal count
        i = w * 97
        while time.perf_counter() < deadline:
            batch = [pool[(i + k) % len(pool)] for k in range(case.batch)]
            i += case.batch
            t0 = time.perf_counter()
            result = await store.put_batch(batch)
            latencies.append(time.perf_counter() - t0)
            if not result.ok:
                raise RuntimeError(f"put failed: {result.status} {result.reason}")
            count += case.batch
            if case.flush is FlushMode.ASYNC and count % 1024 < case.batch:
                await asyncio.sleep(0)  # let dispatch and flush callbacks run

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(case.writers)))
    await store.flush()
    elapsed = time.perf_counter() - started
    written = store.commitlog.write_offset
    fsyncs = store._flush.fsync_count
    await store.close()
    latencies.sort()
    return {
        "records": count,
        "bytes": written,
        "seconds": elapsed,
        "records_per_s": count / elapsed,
        "mb_per_s": written / elapsed / 1e6,
        "fsyncs": fsyncs,
        "put_p50_ms": latencies[len(latencies) // 2] * 1000,
        "put_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def _append_commitlog(root: Path, batch: int, seconds: float, flush_bytes: int) -> dict[str, Any]:
    """The bare commit-log append path with the async flush policy, inline."""
    root.mkdir(parents=True, exist_ok=True)
    log = CommitLog(root, 256 << 20)
    pool = _messages(4096)
    count = 0
    synced = 0
    started = time.perf_counter()
    deadline = started + seconds
    try:
        while time.perf_counter() < deadline:
            log.append([pool[(count + k) % len(pool)] for k in range(batch)], 1)
            count += batch
            if log.write_offset - synced >= flush_bytes:
                synced = log.flush_to(log.write_offset)
        log.flush_to(log.write_offset)
        elapsed = time.perf_counter() - started
        written = log.write_offset
    finally:
        log.close()
    return {
        "records": count,
        "bytes": written,
        "seconds": elapsed,
        "records_per_s": count / elapsed,
        "mb_per_s": written / elapsed / 1e6,
    }


def _raw_write(path: Path, total: int, flush: FlushMode, flush_bytes: int) -> dict[str, Any]:
    """The physical limit: the same bytes in 1 MiB chunks, same fsync policy."""
    chunk = os.urandom(CHUNK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total + CHUNK)
        written = since_sync = 0
        started = time.perf_counter()
        while written < total:
            n = os.pwrite(fd, chunk, written)
            written += n
            since_sync += n
            if flush is FlushMode.SYNC or since_sync >= flush_bytes:
                os.fdatasync(fd)
                since_sync = 0
        os.fdatasync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"bytes": written, "seconds": elapsed, "mb_per_s": written / elapsed / 1e6}


def _raw_fdatasync_1k(path: Path, count: int = 2000) -> float:
    """How many 1 KiB write + fdatasync pairs the disk does per second, alone."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, count * 1024)
        data = os.urandom(1024)
        started = time.perf_counter()
        for i in range(count):
            os.pwrite(fd, data, i * 1024)
            os.fdatasync(fd)
        return count / (time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


async def _read(root: Path) -> dict[str, Any]:
    store = await MessageStore.open(_config(root, FlushMode.ASYNC))
    try:
        started = time.perf_counter()
        consumed = 0
        for qid in range(QUEUES):
            offset, hi = store.queue_offsets("bench", qid)
            while offset < hi:
                got = store.get_messages("bench", qid, offset, 64)
                consumed += len(got.messages)
                offset = got.next_offset
        queue_elapsed = time.perf_counter() - started
        started = time.perf_counter()
        scanned = sum(1 for _ in store.commitlog.iter_records(store.commitlog.min_offset))
        scan_elapsed = time.perf_counter() - started
        total = store.commitlog.write_offset - store.commitlog.min_offset
        paths = [s.path for s in store.commitlog.segments]
    finally:
        await store.close()
    started = time.perf_counter()
    raw = 0
    for path in paths:
        with path.open("rb", buffering=0) as f:
            while raw < total and (data := f.read(CHUNK)):
                raw += len(data)
    raw_elapsed = time.perf_counter() - started
    return {
        "records": consumed,
        "consume_records_per_s": consumed / queue_elapsed,
        "consume_mb_per_s": total / queue_elapsed / 1e6,
        "scan_records_per_s": scanned / scan_elapsed,
        "scan_mb_per_s": total / scan_elapsed / 1e6,
        "raw_read_mb_per_s": raw / raw_elapsed / 1e6,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


async def _interleaved(
    base: Path, label: str, run: Any, flush: FlushMode, flush_bytes: int, reps: int = 2
) -> dict[str, Any]:
    """Run a case ``reps`` times and the raw limit ``reps + 1`` times, interleaved."""
    results: list[dict[str, Any]] = []
    raws: list[float] = []
    for rep in range(reps + 1):
        if results:
            raws.append(
                _raw_write(base / "raw", results[-1]["bytes"], flush, flush_bytes)["mb_per_s"]
            )
        if rep < reps:
            root = base / f"{label}-{rep}"
            results.append(await run(root))
            shutil.rmtree(root, ignore_errors=True)
    raws.append(_raw_write(base / "raw", results[0]["bytes"], flush, flush_bytes)["mb_per_s"])
    best = sorted(results, key=lambda r: r["records_per_s"])[len(results) // 2]
    raw = _median(raws)
    return {
        **best,
        "records_per_s": _median([r["records_per_s"] for r in results]),
        "mb_per_s": _median([r["mb_per_s"] for r in results]),
        "raw_mb_per_s": raw,
        "ratio_to_raw": _median([r["mb_per_s"] for r in results]) / raw,
        "runs": len(results),
    }


async def run_store_bench(work_dir: Path | None = None, seconds: float = 3.0) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="rc-bench-", dir=work_dir))
    rows: list[dict[str, Any]] = []
    try:
        flush_bytes = _config(base, FlushMode.ASYNC).flush_bytes
        lone_fsync = _raw_fdatasync_1k(base / "fsync-probe")

        async def commitlog_case(root: Path) -> dict[str, Any]:
            return _append_commitlog(root, 32, seconds, flush_bytes)

        append = await _interleaved(base, "commitlog", commitlog_case, FlushMode.ASYNC, flush_bytes)
        rows.append(
            {"path": "commitlog-append", "flush": "async", "writers": 1, "batch": 32, **append}
        )
        for flush in (FlushMode.ASYNC, FlushMode.SYNC):
            for writers in (1, 8, 64):
                for batch in (1, 32):
                    case = AppendCase(flush, writers, batch, seconds)

                    async def store_case(root: Path, case: AppendCase = case) -> dict[str, Any]:
                        return await _append(root, case)

                    result = await _interleaved(
                        base, f"{flush}-{writers}-{batch}", store_case, flush, flush_bytes
                    )
                    rows.append(
                        {
                            "path": "store-put",
                            "flush": flush.value,
                            "writers": writers,
                            "batch": batch,
                            **result,
                        }
                    )
        read_root = base / "read"
        await _append(read_root, AppendCase(FlushMode.ASYNC, 1, 32, seconds))
        read_row = await _read(read_root)
        shutil.rmtree(read_root, ignore_errors=True)

        def pick(flush: str, writers: int) -> dict[str, Any]:
            return next(
                r
                for r in rows
                if r["path"] == "store-put"
                and r["flush"] == flush
                and r["writers"] == writers
                and r["batch"] == 1
            )

        return {
            "record_body_bytes": RECORD_BODY,
            "seconds_per_case": seconds,
            "append": rows,
            "read": {
                **read_row,
                "ratio_to_raw": read_row["scan_mb_per_s"] / read_row["raw_read_mb_per_s"],
            },
            "lone_fdatasync_1k_per_s": lone_fsync,
            "sync_group_commit_64_vs_1": pick("sync", 64)["records_per_s"]
            / pick("sync", 1)["records_per_s"],
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
