"""Produce and consume benchmarks, each beside its ceiling measured in the same run.

Clients: the official ``rocketmq-python-client`` (one message per SendMessage, as it
sends them; send_async with many in flight; SimpleConsumer receive + ack) and our
LeanClient (batches of messages per request, many requests in flight). The ceiling:
the same client against a server that answers without doing any work
(``rocketcluster.broker.canned``, its own process like the broker). 1 KiB messages.

Below both, the transport limit: a raw grpc.aio client against the canned server's
``Raw`` service (``bytes`` both ways, no protobuf, no broker logic), in the shapes of
lean_produce and lean_consume, with the CPU each process burns. When both sides use a
whole core there, no broker on this transport can go faster in that shape.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from rocketcluster.api.client.lean import CHANNEL_OPTIONS, LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.broker.canned import RAW_BATCH, RAW_FETCH, RAW_STREAM
from rocketcluster.ctl.bench.client_cases import CONSUME, PRODUCE
from rocketcluster.ctl.local.addresses import claim
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import main_thread_loop_for_the_official_client

BODY = os.urandom(1024)
TOPIC = "bench"
GROUP = "bench"
LEAN_BATCH = 32
LEAN_INFLIGHT = 16
OFFICIAL_INFLIGHT = 64


def _percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(latencies)
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


# -- the lean client ---------------------------------------------------------------


async def lean_produce(endpoint: str, seconds: float, topic: str = TOPIC) -> dict[str, Any]:
    latencies: list[float] = []
    sent = errors = 0
    deadline = time.perf_counter() + seconds
    async with LeanClient(endpoint) as client:

        async def worker() -> None:
            nonlocal sent, errors
            while time.perf_counter() < deadline:
                batch = [OutgoingMessage(BODY) for _ in range(LEAN_BATCH)]
                started = time.perf_counter()
                try:
                    entries = await client.send(topic, batch)
                except Exception:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)
                sent += sum(1 for e in entries if e.status.code == 20000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(LEAN_INFLIGHT)))
        elapsed = time.perf_counter() - started
    return {
        "messages": sent,
        "seconds": elapsed,
        "msgs_per_s": sent / elapsed,
        "errors": errors,
        **_percentiles(latencies),
    }


async def lean_consume(endpoint: str, seconds: float, want: int | None) -> dict[str, Any]:
    latencies: list[float] = []
    got = errors = empty = 0
    deadline = time.perf_counter() + seconds
    async with LeanClient(endpoint) as client:

        async def worker() -> None:
            nonlocal got, errors, empty
            while time.perf_counter() < deadline and (want is None or got < want):
                started = time.perf_counter()
                try:
                    messages = await client.receive(GROUP, TOPIC, batch=LEAN_BATCH, poll_ms=500)
                    if messages:
                        await client.ack(GROUP, TOPIC, messages)
                except Exception:
                    errors += 1
                    continue
                if not messages:
                    empty += 1
                    continue
                latencies.append(time.perf_counter() - started)
                got += len(messages)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(LEAN_INFLIGHT // 2)))
        elapsed = time.perf_counter() - started
    return {
        "messages": got,
        "seconds": elapsed,
        "msgs_per_s": got / elapsed,
        "errors": errors,
        **_percentiles(latencies),
    }


# -- the official client -----------------------------------------------------------


def official_produce(endpoint: str, seconds: float, topic: str = TOPIC) -> dict[str, Any]:
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.model import Message
    from rocketmq.v5.producer import Producer

    main_thread_loop_for_the_official_client()
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    slots = threading.Semaphore(OFFICIAL_INFLIGHT)
    lock = threading.Lock()
    latencies: list[float] = []
    counts = {"sent": 0, "errors": 0}

    def done(started: float, future: Any) -> None:
        with lock:
            if future.exception() is None:
                counts["sent"] += 1
                latencies.append(time.perf_counter() - started)
            else:
                counts["errors"] += 1
        slots.release()

    try:
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            slots.acquire()
            msg = Message()
            msg.topic = topic
            msg.body = BODY
            t0 = time.perf_counter()
            producer.send_async(msg).add_done_callback(lambda f, t0=t0: done(t0, f))
        for _ in range(OFFICIAL_INFLIGHT):
            slots.acquire()
        elapsed = time.perf_counter() - started
    finally:
        producer.shutdown()
    sent = counts["sent"]
    return {
        "messages": sent,
        "seconds": elapsed,
        "msgs_per_s": sent / elapsed,
        "errors": counts["errors"],
        **_percentiles(latencies),
    }


def official_consume(
    endpoint: str, seconds: float, want: int | None, threads: int = 4, topic: str = TOPIC
) -> dict[str, Any]:
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression

    main_thread_loop_for_the_official_client()
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials(), request_timeout=10),
        GROUP,
        {topic: FilterExpression()},
        await_duration=1,
    )
    consumer.startup()
    lock = threading.Lock()
    latencies: list[float] = []
    counts = {"got": 0, "errors": 0}
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline and (want is None or counts["got"] < want):
            t0 = time.perf_counter()
            try:
                messages = consumer.receive(32, 30)
                for m in messages:  # ack_async returns nothing to wait on in 5.1.2
                    consumer.ack(m)
            except Exception:
                with lock:
                    counts["errors"] += 1
                continue
            if messages:
                with lock:
                    counts["got"] += len(messages)
                    latencies.append(time.perf_counter() - t0)

    try:
        started = time.perf_counter()
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - started
    finally:
        consumer.shutdown()
    got = counts["got"]
    return {
        "messages": got,
        "seconds": elapsed,
        "msgs_per_s": got / elapsed,
        "errors": counts["errors"],
        **_percentiles(latencies),
    }


# -- the transport limit -----------------------------------------------------------

LIMIT = ("raw_unary", "raw_stream")
_SHAPES = {
    "raw_unary": f"like lean_produce: {LEAN_INFLIGHT} calls in flight, "
    f"{LEAN_BATCH} x 1 KiB per request, a short answer",
    "raw_stream": f"like lean_consume: {LEAN_INFLIGHT // 2} calls in flight, "
    f"{LEAN_BATCH} x 1 KiB streamed per call",
    "raw_fetch": f"like a batched receive: {LEAN_INFLIGHT // 2} unary calls in flight, "
    f"{LEAN_BATCH} x 1 KiB in one answer",
}
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of stat(5)


class CpuUse:
    """CPU seconds per second of wall time burnt by the server process and by this
    one (the client) while the block runs: on 2 cores it tells which side limits a
    case (a side near 1.0 is saturated; Python runs one thread at a time)."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.figures: dict[str, float | None] = {}

    def __enter__(self) -> CpuUse:
        self._server = _cpu_seconds(self.server_pid) if self.server_pid else 0.0
        self._client = _cpu_seconds(os.getpid())
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = max(1e-9, time.perf_counter() - self._started)
        server = (_cpu_seconds(self.server_pid) - self._server) if self.server_pid else None
        self.figures = {
            "server_cpu": None if server is None else server / elapsed,
            "client_cpu": (_cpu_seconds(os.getpid()) - self._client) / elapsed,
        }


async def _drive(
    one_call: Callable[[], Awaitable[int]], inflight: int, deadline: float
) -> tuple[int, int, list[float]]:
    """``inflight`` loops of ``one_call`` (it returns how many messages it carried, or
    raises) until ``deadline``: messages, errors and the latency of each call."""
    latencies: list[float] = []
    messages = errors = 0

    async def worker() -> None:
        nonlocal messages, errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                carried = await one_call()
            except (grpc.RpcError, ValueError):
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)
            messages += carried

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return messages, errors, latencies


async def _raw_unary(channel: grpc.aio.Channel, deadline: float) -> tuple[int, int, list[float]]:
    call = channel.unary_unary(RAW_BATCH)
    request = BODY * LEAN_BATCH
    ack = len(request).to_bytes(4, "big")

    async def one() -> int:
        if await call(request) != ack:
            raise ValueError("the raw Batch answer does not acknowledge the whole request")
        return LEAN_BATCH

    return await _drive(one, LEAN_INFLIGHT, deadline)


async def _raw_stream(channel: grpc.aio.Channel, deadline: float) -> tuple[int, int, list[float]]:
    call = channel.unary_stream(RAW_STREAM)
    request = LEAN_BATCH.to_bytes(4, "big")

    async def one() -> int:
        return len([_ async for _ in call(request)])

    return await _drive(one, LEAN_INFLIGHT // 2, deadline)


async def _raw_fetch(channel: grpc.aio.Channel, deadline: float) -> tuple[int, int, list[float]]:
    call = channel.unary_unary(RAW_FETCH)
    request = LEAN_BATCH.to_bytes(4, "big")
    size = LEAN_BATCH * len(BODY)

    async def one() -> int:
        if len(await call(request)) != size:
            raise ValueError("the raw Fetch answer does not carry the batch asked for")
        return LEAN_BATCH

    return await _drive(one, LEAN_INFLIGHT // 2, deadline)


_RAW_CASES = {"raw_unary": _raw_unary, "raw_stream": _raw_stream, "raw_fetch": _raw_fetch}


async def _limit_case(
    endpoint: str, seconds: float, case: str, server_pid: int | None
) -> dict[str, Any]:
    run = _RAW_CASES[case]
    async with grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS) as channel:
        await channel.unary_unary(RAW_BATCH)(b"")  # connect outside the measurement
        with CpuUse(server_pid) as use:
            started = time.perf_counter()
            messages, errors, latencies = await run(channel, started + seconds)
            elapsed = time.perf_counter() - started
    return {
        "shape": _SHAPES[case],
        "messages": messages,
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "errors": errors,
        **_percentiles(latencies),
        **use.figures,
    }


def transport_limit(
    endpoint: str,
    seconds: float,
    *,
    server_pid: int | None = None,
    cases: tuple[str, ...] = LIMIT,
) -> dict[str, dict[str, Any]]:
    """What grpc.aio alone carries: ``cases`` against the canned server's ``Raw``
    service, each for ``seconds`` on its own channel. CPU figures are CPU seconds per
    second of the server process (``server_pid``; None when not given) and of this one."""
    return {case: asyncio.run(_limit_case(endpoint, seconds, case, server_pid)) for case in cases}


# -- servers -----------------------------------------------------------------------


class CannedServer:
    """The no-work server in its own process (so it does not share our GIL)."""

    def __init__(self, *, messaging_only: bool = False) -> None:
        """``messaging_only``: without ConsumeService (LeanClient then falls back)."""
        # The address stays claimed until the server listens: a local cluster starting
        # meanwhile in another test worker must not take it and bind first, as
        # the momentary claim of choosing let it (seen with three workers).
        with claim(1, [8081], set(), start=240) as picked:
            [host] = picked.hosts
            self.endpoint = f"{host}:8081"
            extra = ["--messaging-only"] if messaging_only else []
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rocketcluster.broker.canned",
                    "--host",
                    host,
                    "--port",
                    "8081",
                    *extra,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self._proc.stdout is not None
            line = self._proc.stdout.readline()
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError(f"the canned server did not start: {line!r}")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def bench_cluster(flush: str) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": f"bench-{flush}"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": flush},
                "topics": [{"name": TOPIC, "queues": 8}],
                "consumerGroups": [{"name": GROUP}],
            },
        }
    )


def _suite(
    endpoint: str,
    seconds: float,
    cases: tuple[str, ...],
    *,
    real_broker: bool,
    server_pid: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``cases`` against one server (``server_pid``: its process, for the CPU
    figures). On a real broker a consume case reads what a produce by the same client
    stored (produced first when the case list has none)."""
    out: dict[str, dict[str, Any]] = {}
    for client in ("lean", "official"):
        produce, consume = f"{client}_produce", f"{client}_consume"
        want: int | None = None
        if produce in cases or (real_broker and consume in cases):
            with CpuUse(server_pid) as use:
                result = (
                    asyncio.run(lean_produce(endpoint, seconds))
                    if client == "lean"
                    else official_produce(endpoint, seconds)
                )
            if produce in cases:
                out[produce] = {**result, **use.figures}
            want = result["messages"] if real_broker else None
        if consume in cases:
            limit = seconds * 3 if want else seconds
            with CpuUse(server_pid) as use:
                result = (
                    asyncio.run(lean_consume(endpoint, limit, want))
                    if client == "lean"
                    else official_consume(endpoint, limit, want)
                )
            out[consume] = {**result, **use.figures}
    return out


def _ceiling(
    seconds: float, cases: tuple[str, ...], limit_cases: tuple[str, ...] = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The ceiling for ``cases`` and, first (while no client library has left threads
    in this process), the transport limit for ``limit_cases``, on one canned server."""
    canned = CannedServer()
    try:
        limits = transport_limit(canned.endpoint, seconds, server_pid=canned.pid, cases=limit_cases)
        ceiling = _suite(canned.endpoint, seconds, cases, real_broker=False, server_pid=canned.pid)
        return ceiling, limits
    finally:
        canned.stop()


def _limit_cases(cases: tuple[str, ...]) -> tuple[str, ...]:
    """The limit cases in the shapes of the lean cases asked for."""
    return tuple(
        f
        for f, like in (("raw_unary", PRODUCE), ("raw_stream", CONSUME))
        if any(c in cases for c in like)
    )


def run_client_bench(
    work_dir: Path,
    seconds: float = 5.0,
    flushes: tuple[str, ...] = ("async", "sync"),
    cases: tuple[str, ...] = PRODUCE + CONSUME,
) -> dict[str, Any]:
    """Ceiling, then each broker, then the ceiling again (the machine is shared and
    noisy): ratios compare each broker figure with the mean of the two ceilings. The
    transport limit is measured once, with the first ceiling."""
    logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)
    before, limit = _ceiling(seconds, cases, _limit_cases(cases))
    results: dict[str, Any] = {"seconds_per_case": seconds, "broker": {}, "ratios": {}}
    for flush in flushes:
        runtime = LocalRuntime(work_dir / f"broker-{flush}")
        runtime.down()
        state = runtime.up(bench_cluster(flush))
        try:
            [broker] = [p for p in state["processes"] if p["role"] == "broker"]
            results["broker"][flush] = _suite(
                state["clientEndpoints"],
                seconds,
                cases,
                real_broker=True,
                server_pid=broker["pid"],
            )
        finally:
            runtime.down()
    after, _ = _ceiling(seconds, cases)
    ceiling = {
        case: {
            **before[case],
            "msgs_per_s": (before[case]["msgs_per_s"] + after[case]["msgs_per_s"]) / 2,
            "runs": [before[case]["msgs_per_s"], after[case]["msgs_per_s"]],
        }
        for case in before
    }
    results["ceiling"] = ceiling
    results["transport_limit"] = limit
    for flush in flushes:
        results["ratios"][flush] = {
            case: results["broker"][flush][case]["msgs_per_s"]
            / max(1e-9, ceiling[case]["msgs_per_s"])
            for case in ceiling
        }
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    table = [
        {"server": "grpc.aio raw (limit)", "case": case, **_pick(result)}
        for case, result in results.get("transport_limit", {}).items()
    ]
    for case, ceil in results["ceiling"].items():
        table.append({"server": "canned (ceiling)", "case": case, **_pick(ceil)})
        for flush, per_case in results["broker"].items():
            table.append(
                {
                    "server": f"broker flush={flush}",
                    "case": case,
                    **_pick(per_case[case]),
                    "ratio": results["ratios"][flush][case],
                }
            )
    return table


def _pick(result: dict[str, Any]) -> dict[str, Any]:
    keep = ("msgs_per_s", "p50_ms", "p99_ms", "messages", "errors", "server_cpu", "client_cpu")
    return {k: v for k, v in result.items() if k in keep and v is not None}
