"""Tier benchmark: what tiered storage costs the producer, and how fast cold reads are,
each beside the local case measured in the same run on the same machine.

Produce through a broker (what users see): a standalone broker process started with the
local runtime (async flush, 64 MiB segments) per case — tier off, tier on a POSIX
directory, tier on S3 (moto, in a process of its own: ``s3_process``) — and our batched
client (``LeanClient``) in this process keeping ``senders`` SendMessage calls in flight,
``batch`` 1 KiB messages in each, for ``seconds`` after an untimed warm-up. A fresh
broker per case: every case starts from the same empty store and catalogue, nothing an
earlier case left is still uploading, and no idle broker runs beside the one measured.
The tier uploads as configured (4 MiB batches, a 1 s interval) while the client sends;
what it uploaded in the timed window comes from ``GET /v1/tier`` at both ends. Then
``POST /v1/tier/flush`` until the tier holds every stored message (the case fails
otherwise). CPU seconds of the broker, of this process (the client) and of the S3
server come from ``/proc/<pid>/stat``; the broker's CPU over that catch-up, per MB
uploaded, is what the uploader costs with nothing else running.

Produce in-process, the store at saturation (the worst case): an in-process store (async
flush, 1 KiB bodies, 8 queues, batches of 32 per put, several concurrent writers) for
``seconds``, with no tier, with a tier uploading to a POSIX directory, and with a tier
uploading to S3. The tier runs as in a broker (``start()``, master) with a short upload
interval so it uploads while the producer runs, except that it writes segments on
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

The machine is shared and noisy: the cases run interleaved, ``reps`` times each, and
medians and ratios of medians are reported — never a single run, never an absolute
claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster, TieredStorageSpec
from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig
from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.cache import SegmentCache
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.broker.tiered.reader import TierReader
from rocketcluster.broker.tiered.service import TieredStorage
from rocketcluster.ctl.bench.s3_process import S3Endpoint
from rocketcluster.ctl.testing import LocalBroker, local_broker

TOPIC = "bench"
QUEUES = 8
RECORD_BODY = 1024
PUT_BATCH = 32
SEGMENT_SIZE = 256 << 20
CLUSTER = "bench"
BUCKET = "rc-bench-tier"
GOAL_SLOWDOWN = 0.10
KEPT_UP = 0.9  # an uploader that uploaded less during the run fell behind
# ... or, in a broker, one whose oldest message waits longer than this many intervals
KEPT_UP_INTERVALS = 3
READ_AHEAD_BYTES = 16 << 20


@dataclass(frozen=True)
class TierSettings:
    """How the tier under test is configured."""

    upload_batch_bytes: int = 4 << 20
    upload_interval_s: float = 1.0
    read_ahead_bytes: int = READ_AHEAD_BYTES


@dataclass(frozen=True)
class Backends:
    """Where the tiers go: a directory for POSIX, and an S3 endpoint (or none)."""

    posix_root: Path
    s3: Callable[[str], TierBackend] | None  # a backend under the given prefix

    def make(self, kind: str, name: str) -> TierBackend:
        if kind == "posix":
            root = self.posix_root / name
            root.mkdir(parents=True)
            return PosixBackend(root)
        if self.s3 is None:
            raise ValueError("no S3 endpoint")
        return self.s3(name)


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
    """Put batches of 32 from ``writers`` writers for ``seconds``, with a running tier
    uploading to ``tier`` (kind, backend) or none; then let the tier catch up."""
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
        count = 0
        deadline = time.perf_counter() + seconds

        async def writer(w: int) -> None:
            nonlocal count
            i = w * 97
            while time.perf_counter() < deadline:
                await _put_all(store, pool, i, PUT_BATCH)
                i += PUT_BATCH
                count += PUT_BATCH
                # The loop turns between puts, as between a broker's requests: dispatch,
                # flush and the tier get their turns as they would there.
                await asyncio.sleep(0)

        started = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        during = _uploaded(tiered)
        await store.flush()
        elapsed = time.perf_counter() - started
        written = store.commitlog.write_offset
        row: dict[str, Any] = {
            "records": count,
            "bytes": written,
            "seconds": elapsed,
            "records_per_s": count / elapsed,
            "mb_per_s": written / elapsed / 1e6,
        }
        if tiered is not None:
            row.update(await _catch_up(tiered, during, count, elapsed))
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
    tier: TieredStorage, during: tuple[int, int, int, float], records: int, elapsed: float
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
    up_bytes, segments, messages, write_s = during
    return {
        "uploaded_bytes_during_run": up_bytes,
        "uploaded_segments_during_run": segments,
        "uploaded_messages_during_run": messages,
        "uploaded_fraction_during_run": messages / records if records else 0.0,
        "upload_write_seconds_during_run": write_s,
        "catch_up_seconds": catch_up_s,
        # stored and uploaded: the records over the run and the catch-up after it
        "tiered_records_per_s": records / (elapsed + catch_up_s),
        "segments_in_tier": sum(len(queue.segments) for queue in tier.catalog),
    }


# -- produce through a broker -------------------------------------------------------

BROKER_SENDERS = 8
BROKER_SEGMENT_SIZE = 64 << 20
BROKER_WARMUP_S = 1.0
ADMIN_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 120.0
SETTLE_POLL_S = 0.2
MIN_CATCH_UP_BYTES = 1_000_000  # below this the catch-up's CPU per MB means little
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class BrokerLoad:
    """How the broker cases produce: ``senders`` SendMessage calls in flight on one
    LeanClient channel, ``batch`` 1 KiB messages in each, for ``seconds`` after
    ``warmup_s`` that are not timed (the channel connects, the first segment is made)."""

    seconds: float = 10.0
    senders: int = BROKER_SENDERS
    batch: int = PUT_BATCH
    warmup_s: float = BROKER_WARMUP_S


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of stat(5)


def machine_busy_seconds() -> float:
    """CPU seconds every core of this machine spent busy since boot (/proc/stat): with
    the processes' own figures it tells what else ran during a case."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / _TICK  # user..steal (guest is counted in user)


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {
        "machine": machine_busy_seconds(),
        **{who: cpu_seconds(pid) for who, pid in pids.items()},
    }


def broker_cluster(
    kind: str, where: dict[str, Any] | None, settings: TierSettings
) -> RocketCluster:
    """One standalone broker, async flush, the bench topic; a tier on ``kind`` (its
    manifest section ``where``) unless ``kind`` is ``off``."""
    tiered: dict[str, Any] = {"enabled": False}
    if kind != "off":
        tiered = {
            "enabled": True,
            "backend": kind,
            kind: where,
            "uploadBatchBytes": settings.upload_batch_bytes,
            "uploadIntervalSeconds": settings.upload_interval_s,
            "readAheadBytes": settings.read_ahead_bytes,
        }
    return RocketCluster.model_validate(
        {
            "metadata": {"name": CLUSTER},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "async"},
                "topics": [{"name": TOPIC, "queues": QUEUES}],
                "tieredStorage": tiered,
            },
        }
    )


async def _send_for(client: LeanClient, seconds: float, load: BrokerLoad) -> dict[str, Any]:
    """``load.senders`` loops sending batches until ``seconds`` have passed: messages
    acknowledged, messages not, and each request's latency."""
    body = os.urandom(RECORD_BODY)
    latencies: list[float] = []
    acked = failed = 0
    deadline = time.perf_counter() + seconds

    async def sender() -> None:
        nonlocal acked, failed
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                entries = await client.send(TOPIC, [OutgoingMessage(body)] * load.batch)
            except (grpc.RpcError, LeanClientError):
                failed += load.batch
                continue
            latencies.append(time.perf_counter() - started)
            ok = sum(1 for e in entries if e.status.code == pb.Code.OK)
            acked += ok
            failed += len(entries) - ok

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(load.senders)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "acked": acked,
        "failed": failed,
        "seconds": elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
    }


async def _admin(http: httpx.AsyncClient, method: str, path: str) -> dict[str, Any]:
    reply = await http.request(method, path)
    reply.raise_for_status()
    data: dict[str, Any] = reply.json()
    return data


def _held(status: dict[str, Any]) -> int:
    """Messages of the bench topic the tier holds."""
    return sum(
        q["committedOffset"] - q["startOffset"] for q in status["queues"] if q["topic"] == TOPIC
    )


async def _settle(http: httpx.AsyncClient, acked: int, tiered: bool) -> dict[str, Any]:
    """Wait until the broker's queues hold every acknowledged message and, with a tier,
    the tier every stored one (flushing it to hurry it); fail after SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        topic = await _admin(http, "GET", f"/v1/topics/{TOPIC}")
        stored = sum(q["maxOffset"] - q["minOffset"] for q in topic["queueOffsets"])
        status: dict[str, Any] = {}
        done = stored >= acked
        if done and tiered:
            await _admin(http, "POST", "/v1/tier/flush")
            status = await _admin(http, "GET", "/v1/tier")
            done = _held(status) == stored and status["pendingMessages"] == 0
        if done:
            return {"stored": stored, "tier": status}
        if time.monotonic() > deadline:
            held = _held(status) if status else None
            raise RuntimeError(
                f"after {SETTLE_TIMEOUT_S:.0f}s the broker stores {stored} of {acked} "
                f"acknowledged messages and its tier holds {held} (status: {status})"
            )
        await asyncio.sleep(SETTLE_POLL_S)


async def _through_broker(
    broker: LocalBroker, pids: dict[str, int], load: BrokerLoad, tiered: bool
) -> dict[str, Any]:
    """Warm up, produce for ``load.seconds`` with the broker's tier (if any) reported at
    both ends and CPU read across it, then settle: the row of one case."""
    async with (
        LeanClient(broker.endpoints) as client,
        httpx.AsyncClient(
            base_url=f"http://{broker.admin_address}", timeout=ADMIN_TIMEOUT_S
        ) as http,
    ):
        warm = await _send_for(client, load.warmup_s, load)
        before = await _admin(http, "GET", "/v1/tier")
        cpu_before = _cpu(pids)
        run = await _send_for(client, load.seconds, load)
        cpu_after = _cpu(pids)
        after = await _admin(http, "GET", "/v1/tier")
        acked = warm["acked"] + run["acked"]
        started = time.perf_counter()
        settled = await _settle(http, acked, tiered)
        catch_up_s = time.perf_counter() - started
        cpu_settled = _cpu(pids)
    elapsed = run["seconds"]
    cpu = {who: cpu_after[who] - cpu_before[who] for who in cpu_after}
    messages = run["acked"]
    row: dict[str, Any] = {
        "messages": messages,
        "failed": warm["failed"] + run["failed"],
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "mb_per_s": messages * RECORD_BODY / elapsed / 1e6,  # message bodies
        "p50_ms": run["p50_ms"],
        "p99_ms": run["p99_ms"],
        "broker_cpu_s": cpu["broker"],
        "broker_cpu": cpu["broker"] / elapsed,  # cores
        "broker_cpu_us_per_msg": cpu["broker"] / max(1, messages) * 1e6,
        "client_cpu": cpu["client"] / elapsed,
        "s3_server_cpu": cpu["s3"] / elapsed if "s3" in cpu else None,
        # everything else on the machine (other processes: the machine is shared)
        "other_cpu": max(0.0, cpu["machine"] - sum(cpu[who] for who in pids)) / elapsed,
        "stored_messages": settled["stored"],
    }
    if not tiered:
        return row
    up_before, up_after = before["uploads"], after["uploads"]
    status = settled["tier"]
    catch_up_bytes = status["uploads"]["bytes"] - up_after["bytes"]
    catch_up_cpu = cpu_settled["broker"] - cpu_after["broker"]
    row.update(
        {
            "uploaded_bytes_during_run": up_after["bytes"] - up_before["bytes"],
            "uploaded_segments_during_run": up_after["segments"] - up_before["segments"],
            "uploaded_messages_during_run": up_after["messages"] - up_before["messages"],
            # of everything acknowledged by the end of the run, warm-up included
            "uploaded_fraction_during_run": up_after["messages"] / max(1, acked),
            "pending_messages_at_end": after["pendingMessages"],
            "lag_bytes_at_end": after["lagBytes"],
            "lag_seconds_at_end": after["lagSeconds"],
            "catch_up_seconds": catch_up_s,
            "catch_up_bytes": catch_up_bytes,
            "catch_up_broker_cpu_s": catch_up_cpu,
            "uploader_cpu_ms_per_mb": (
                catch_up_cpu / (catch_up_bytes / 1e6) * 1e3
                if catch_up_bytes >= MIN_CATCH_UP_BYTES
                else None
            ),
            "tier_messages": _held(status),
            "segments_in_tier": status["segments"],
            "tier_bytes": status["tierBytes"],
            "uploaded_bytes": status["uploads"]["bytes"],
            "upload_errors": status["uploads"]["errors"],
        }
    )
    return row


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment (which the brokers it starts inherit)
    while the block runs."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def broker_case(
    kind: str,
    case_dir: Path,
    load: BrokerLoad,
    settings: TierSettings,
    s3: S3Endpoint | None,
) -> dict[str, Any]:
    """One case on a broker of its own, stopped (by pid) at the end."""
    where: dict[str, Any] | None = None
    env: dict[str, str] = {}
    if kind == "posix":
        tier = case_dir / "tier"
        tier.mkdir(parents=True)
        where = {"path": str(tier)}
    elif kind == "s3":
        if s3 is None:
            raise ValueError("no S3 endpoint")
        where = {
            "endpoint": s3.endpoint,
            "bucket": s3.bucket,
            "prefix": case_dir.name,
            "region": s3.region,
        }
        env = s3.environment()
    cluster = broker_cluster(kind, where, settings)
    overrides = {"segment_size": BROKER_SEGMENT_SIZE}
    with _environment(env), local_broker(cluster, case_dir / "local", overrides) as broker:
        pids = {"broker": int(broker.process["pid"]), "client": os.getpid()}
        if s3 is not None:
            pids["s3"] = s3.pid
        return asyncio.run(_through_broker(broker, pids, load, tiered=kind != "off"))


def _median_of(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return median(values) if values else None


def run_broker_produce(
    base: Path,
    kinds: list[str],
    load: BrokerLoad,
    reps: int,
    settings: TierSettings,
    s3: S3Endpoint | None,
) -> dict[str, Any]:
    """Each case ``reps`` times, interleaved (off, posix, s3, off, ...), each on a
    fresh broker; medians per case, slowdowns against the median of ``off`` and, per
    repetition, against the ``off`` run of the same repetition."""
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ["off", *kinds]}
    for rep in range(reps):
        for kind, results in runs.items():
            name = f"broker-{kind}-{rep}"
            try:
                results.append(broker_case(kind, base / name, load, settings, s3))
            finally:
                shutil.rmtree(base / name, ignore_errors=True)
                if kind == "s3" and s3 is not None:
                    _empty(_s3_maker(s3)(name), name)
    off = runs["off"]
    off_rate = median([r["msgs_per_s"] for r in off])
    rows = []
    for kind, results in runs.items():
        row = {"case": kind, **_summary(results, "msgs_per_s")}
        for key in (
            "broker_cpu",
            "broker_cpu_us_per_msg",
            "client_cpu",
            "s3_server_cpu",
            "other_cpu",
        ):
            row[key] = _median_of(results, key)
        if kind != "off":
            row["slowdown"] = 1 - row["msgs_per_s"] / off_rate
            row["runs_slowdown"] = [
                round(1 - r["msgs_per_s"] / b["msgs_per_s"], 3)
                for r, b in zip(results, off, strict=True)
            ]
            for key in (
                "uploaded_bytes_during_run",
                "uploaded_fraction_during_run",
                "lag_seconds_at_end",
                "uploader_cpu_ms_per_mb",
            ):
                row[key] = _median_of(results, key)
            # The broker's CPU beyond what storing as many messages costs with the tier
            # off (same repetition), per MB the tier uploaded during the run.
            row["extra_cpu_ms_per_uploaded_mb"] = median(
                [
                    (r["broker_cpu_s"] - r["messages"] * b["broker_cpu_s"] / b["messages"])
                    / max(1e-9, r["uploaded_bytes_during_run"] / 1e6)
                    * 1e3
                    for r, b in zip(results, off, strict=True)
                ]
            )
        rows.append(row)
    return {
        "client": "LeanClient (batched SendMessage), in the benchmark's process",
        "senders": load.senders,
        "batch": load.batch,
        "seconds_per_case": load.seconds,
        "warmup_s": load.warmup_s,
        "reps": reps,
        "flush": "async",
        "segment_size": BROKER_SEGMENT_SIZE,
        "cases": rows,
        "uploader_slowdown": {r["case"]: r["slowdown"] for r in rows if "slowdown" in r},
    }


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


# -- the run ------------------------------------------------------------------------


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _summary(runs: list[dict[str, Any]], rate: str) -> dict[str, Any]:
    """The run with the median ``rate``, with the medians of the rates and every run's
    rate."""
    best = sorted(runs, key=lambda r: r[rate])[len(runs) // 2]
    return {
        **best,
        rate: median([r[rate] for r in runs]),
        "mb_per_s": median([r["mb_per_s"] for r in runs]),
        f"runs_{rate}": [round(r[rate], 1) for r in runs],
        "runs": len(runs),
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
                    await asyncio.to_thread(_empty, backend, name)
    rows = []
    baseline = runs["none"]
    for kind, results in runs.items():
        row = {"case": kind, **_summary(results, "records_per_s")}
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


def _empty(backend: TierBackend, name: str) -> None:
    """Delete what a case uploaded (moto would keep it until it stops)."""
    if isinstance(backend, PosixBackend):
        shutil.rmtree(backend.root, ignore_errors=True)
        return
    names = [info.name for info in backend.list(f"{CLUSTER}/")]
    if names:
        backend.delete(names)


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
            row = {"case": case, **_summary(results, "messages_per_s")}
            row["ratio_to_local"] = row["messages_per_s"] / local
            if case in dropped:
                row["page_cache_dropped"] = dropped[case]
            rows.append(row)
        return {"bytes": written, "messages": messages, "uploads": uploads, "cases": rows}
    finally:
        await store.close()
        shutil.rmtree(root, ignore_errors=True)
        for kind, backend in tiers.items():
            await asyncio.to_thread(_empty, backend, kind)


@contextlib.contextmanager
def _s3_server(enabled: bool) -> Iterator[S3Endpoint | None]:
    if not enabled:
        yield None
        return
    from rocketcluster.ctl.bench.s3_process import s3_server_process

    with s3_server_process(BUCKET) as server:
        yield server


def _s3_maker(server: S3Endpoint) -> Callable[[str], TierBackend]:
    """Backends on ``server``'s bucket, each under the prefix it is given."""
    from rocketcluster.broker.tiered.s3 import S3Backend

    def make(name: str) -> TierBackend:
        return S3Backend(
            server.bucket,
            prefix=name,
            endpoint=server.endpoint,
            region=server.region,
            access_key=server.access_key,
            secret_key=server.secret_key,
        )

    return make


async def run_tier_bench(
    work_dir: Path | None = None,
    seconds: float = 5.0,
    *,
    messages: int = 65_536,
    reps: int = 3,
    writers: int = 8,
    read_batch: int = 32,
    s3: bool = True,
    broker: bool = True,
    load: BrokerLoad | None = None,
    settings: TierSettings | None = None,
) -> dict[str, Any]:
    """In-process produce, produce through a broker (unless ``broker`` is False), then
    cold reads; ``seconds`` is the in-process case's length, ``load.seconds`` the
    broker case's."""
    settings = settings or TierSettings()
    load = load or BrokerLoad()
    base = Path(tempfile.mkdtemp(prefix="rc-bench-tier-", dir=work_dir))
    kinds = ["posix", "s3"] if s3 else ["posix"]
    try:
        with _s3_server(s3) as server:
            backends = Backends(base / "posix", None if server is None else _s3_maker(server))
            backends.posix_root.mkdir()
            produce = await run_produce(base, backends, kinds, seconds, reps, writers, settings)
            through_broker = (
                await asyncio.to_thread(
                    run_broker_produce, base, kinds, load, reps, settings, server
                )
                if broker
                else None
            )
            reads = await run_reads(base, backends, kinds, messages, reps, read_batch, settings)
        return {
            "record_body_bytes": RECORD_BODY,
            "queues": QUEUES,
            "upload_batch_bytes": settings.upload_batch_bytes,
            "upload_interval_s": settings.upload_interval_s,
            "read_ahead_bytes": settings.read_ahead_bytes,
            "s3_server": "moto in a separate process" if server is not None else None,
            "broker_produce": through_broker,
            "produce_what": "an in-process MessageStore at saturation: the worst case",
            "put_batch": PUT_BATCH,
            "writers": writers,
            "seconds_per_case": seconds,
            "reps": reps,
            "produce": produce,
            "uploader_slowdown": {r["case"]: r["slowdown"] for r in produce if "slowdown" in r},
            "goal_slowdown": GOAL_SLOWDOWN,
            "read_batch": read_batch,
            "read": reads,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


BROKER_COLUMNS = [
    "case",
    "msgs_per_s",
    "mb_per_s",
    "slowdown",
    "p99_ms",
    "broker_cpu",
    "cpu_us_per_msg",
    "client_cpu",
    "s3_cpu",
    "other_cpu",
    "uploaded_mb",
    "uploaded_share",
    "catch_up_s",
    "cpu_ms_per_mb",
]
PRODUCE_COLUMNS = [
    "case",
    "records_per_s",
    "mb_per_s",
    "slowdown",
    "uploaded_mb",
    "uploaded_segments",
    "uploaded_share",
    "catch_up_s",
    "tiered_records_per_s",
]
READ_COLUMNS = [
    "case",
    "messages_per_s",
    "mb_per_s",
    "ratio_to_local",
    "fetches",
    "cache_hits",
    "cache_misses",
    "page_cache_misses",
]


def broker_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The through-a-broker rows, for ``format_table`` with :data:`BROKER_COLUMNS`
    (CPU in cores; cpu_ms_per_mb: the broker's CPU per MB uploaded in the catch-up)."""
    rows = []
    for row in result["broker_produce"]["cases"]:
        shown = {
            "case": row["case"],
            "msgs_per_s": row["msgs_per_s"],
            "mb_per_s": row["mb_per_s"],
            "p99_ms": row["p99_ms"],
            "broker_cpu": row["broker_cpu"],
            "cpu_us_per_msg": row["broker_cpu_us_per_msg"],
            "client_cpu": row["client_cpu"],
            "s3_cpu": row["s3_server_cpu"] if row["s3_server_cpu"] is not None else "",
            "other_cpu": row["other_cpu"],
        }
        if row["case"] != "off":
            per_mb = row["uploader_cpu_ms_per_mb"]
            shown.update(
                slowdown=f"{row['slowdown']:.1%}",
                uploaded_mb=row["uploaded_bytes_during_run"] / 1e6,
                uploaded_share=f"{row['uploaded_fraction_during_run']:.0%}",
                catch_up_s=row["catch_up_seconds"],
                cpu_ms_per_mb="" if per_mb is None else per_mb,
            )
        rows.append(shown)
    return rows


def produce_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The produce rows, for ``format_table`` with :data:`PRODUCE_COLUMNS`."""
    rows = []
    for row in result["produce"]:
        shown = {k: row[k] for k in ("case", "records_per_s", "mb_per_s")}
        if row["case"] != "none":
            shown.update(
                slowdown=f"{row['slowdown']:.1%}",
                uploaded_mb=row["uploaded_bytes_during_run"] / 1e6,
                uploaded_segments=row["uploaded_segments_during_run"],
                uploaded_share=f"{row['uploaded_fraction_during_run']:.0%}",
                catch_up_s=row["catch_up_seconds"],
                tiered_records_per_s=row["tiered_records_per_s"],
            )
        rows.append(shown)
    return rows


def read_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The cold-read rows, for ``format_table`` with :data:`READ_COLUMNS`."""
    return [{k: row.get(k, "") for k in READ_COLUMNS} for row in result["read"]["cases"]]


def _slowdowns(label: str, part: dict[str, Any], goal: str) -> str:
    slow = part["uploader_slowdown"]
    return f"{label} " + ", ".join(f"{k} {v:.1%}" for k, v in slow.items()) + f" {goal}"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The ratios, in words."""
    goal = f"(goal < {result['goal_slowdown']:.0%})"
    lines = []
    broker = result.get("broker_produce")
    if broker is not None:
        lines.append(_slowdowns("through a broker: uploader slowdown", broker, goal))
        for row in broker["cases"]:
            if row["case"] == "off":
                continue
            per_mb = row["uploader_cpu_ms_per_mb"]
            lines.append(
                f"  {row['case']}: uploaded {row['uploaded_bytes_during_run'] / 1e6:.0f} MB "
                f"({row['uploaded_fraction_during_run']:.0%} of the messages) during the "
                f"run, the rest in {row['catch_up_seconds']:.1f} s after it; broker CPU "
                + (f"{per_mb:.0f} ms per MB uploaded (catch-up), " if per_mb is not None else "")
                + f"{row['extra_cpu_ms_per_uploaded_mb']:.0f} ms per MB uploaded during the "
                "run (beyond the off case's CPU per message)"
                + (
                    f"; the S3 server took {row['s3_server_cpu']:.2f} cores of this machine"
                    if row["case"] == "s3" and row["s3_server_cpu"] is not None
                    else ""
                )
                + (
                    f"; it fell behind (its oldest message waited {row['lag_seconds_at_end']:.1f}"
                    " s at the end), so the slowdown understates what keeping up would cost"
                    if row["lag_seconds_at_end"] > KEPT_UP_INTERVALS * result["upload_interval_s"]
                    else ""
                )
            )
    label = "in-process store at saturation, uploader on threads (the worst case): slowdown"
    lines.append(_slowdowns(label, result, goal))
    for row in result["produce"]:
        if row["case"] == "none":
            continue
        share = row["uploaded_fraction_during_run"]
        lines.append(
            f"  {row['case']}: the uploader uploaded {share:.0%} of the records during the "
            f"run (median), the rest in {row['catch_up_seconds']:.1f} s after it"
            + (
                "; it fell behind, so the slowdown understates what keeping up would cost"
                if share < KEPT_UP
                else ""
            )
        )
    reads = {r["case"]: r for r in result["read"]["cases"]}
    lines.append(
        "cold reads / local reads (page cache dropped): "
        + ", ".join(
            f"{case} {reads[case]['ratio_to_local']:.2f}x" for case in reads if case != "local"
        )
    )
    return lines
