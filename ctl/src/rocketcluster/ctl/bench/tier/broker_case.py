"""Produce through a broker (what users see): a standalone broker process started with the
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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.bench.s3_process import S3Endpoint
from rocketcluster.ctl.bench.tier.backends import delete_uploads, s3_backends
from rocketcluster.ctl.bench.tier.medians import median, median_of, summarize_runs
from rocketcluster.ctl.bench.tier.settings import (
    CLUSTER,
    PUT_BATCH,
    QUEUES,
    RECORD_BODY,
    TOPIC,
    WARMUP_UPLOAD_TIMEOUT_S,
    TierSettings,
)
from rocketcluster.ctl.testing import LocalBroker, local_broker

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
    why: dict[str, int] = {}  # messages not acknowledged, by the error or status code
    deadline = time.perf_counter() + seconds

    def count(reason: str, messages: int) -> None:
        why[reason] = why.get(reason, 0) + messages

    async def sender() -> None:
        nonlocal acked, failed
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                entries = await client.send(TOPIC, [OutgoingMessage(body)] * load.batch)
            except grpc.RpcError as exc:
                failed += load.batch
                code = exc.code() if isinstance(exc, grpc.Call) else None
                count(code.name if code is not None else type(exc).__name__, load.batch)
                continue
            except LeanClientError as exc:
                failed += load.batch
                count(str(exc)[:120], load.batch)
                continue
            latencies.append(time.perf_counter() - started)
            ok = sum(1 for e in entries if e.status.code == pb.Code.OK)
            acked += ok
            failed += len(entries) - ok
            for e in entries:
                if e.status.code != pb.Code.OK:
                    count(f"{pb.Code.Name(e.status.code)}: {e.status.message[:80]}", 1)

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(load.senders)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "acked": acked,
        "failed": failed,
        "failures": why,
        "seconds": elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
    }


async def _warm_up(
    client: LeanClient, http: httpx.AsyncClient, load: BrokerLoad, tiered: bool
) -> dict[str, Any]:
    """Send for ``load.warmup_s``; with a tier, go on until its first upload is done
    (at most WARMUP_UPLOAD_TIMEOUT_S): the timed window then measures the uploader at
    work, not its first connection to the backend, which a busy machine can delay past
    a short window."""
    warm = await _send_for(client, load.warmup_s, load)
    deadline = time.monotonic() + WARMUP_UPLOAD_TIMEOUT_S
    while tiered and time.monotonic() < deadline:
        if (await _admin(http, "GET", "/v1/tier"))["uploads"]["segments"] > 0:
            break
        more = await _send_for(client, min(load.warmup_s, 0.5), load)
        warm = {
            "acked": warm["acked"] + more["acked"],
            "failed": warm["failed"] + more["failed"],
            "failures": _merged(warm["failures"], more["failures"]),
        }
    return warm


def _merged(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


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
        warm = await _warm_up(client, http, load, tiered)
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
        "failures": _merged(warm["failures"], run["failures"]),
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
                    delete_uploads(s3_backends(s3)(name), name)
    off = runs["off"]
    off_rate = median([r["msgs_per_s"] for r in off])
    rows = []
    for kind, results in runs.items():
        row = {"case": kind, **summarize_runs(results, "msgs_per_s")}
        for key in (
            "broker_cpu",
            "broker_cpu_us_per_msg",
            "client_cpu",
            "s3_server_cpu",
            "other_cpu",
        ):
            row[key] = median_of(results, key)
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
                row[key] = median_of(results, key)
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
