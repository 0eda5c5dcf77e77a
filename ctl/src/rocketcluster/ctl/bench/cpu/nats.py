"""NATS JetStream R3 beside ours: Debian's ``nats-server`` as a 3-node cluster on
loopback with file storage in a temp dir, a stream with 3 replicas, and a nats-py
publisher awaiting each PubAck with many publishes in flight (``publish``, run in the
load process). Skipped, with a reason, when ``nats-server`` is not installed."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rocketcluster.ctl.bench.client_bench import BODY, _percentiles

STREAM = "BENCH"
SUBJECT = "bench"
INFLIGHT = 256
NODES = 3


class NatsError(RuntimeError):
    """The NATS cluster did not come up: what was waited for and the nodes' logs."""

    def __init__(self, what: str, logs: str) -> None:
        super().__init__(f"NATS JetStream R3: {what}; logs end: {logs[-1500:]}")
        self.what, self.logs = what, logs


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class NatsCluster:
    """Three ``nats-server`` processes (ours: stopped by PID in ``stop``) with
    JetStream on, clustered over loopback routes, their data in a temp dir."""

    def __init__(self, binary: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="bench-nats-"))
        ports = _free_ports(2 * NODES)
        client, route = ports[:NODES], ports[NODES:]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in route)
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(NODES):
            store = self.directory / f"n{i}"
            store.mkdir()
            log = (self.directory / f"n{i}.log").open("wb")
            argv = [binary, "-a", "127.0.0.1", "-p", str(client[i]), "-n", f"n{i}"]
            argv += ["--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{route[i]}"]
            argv += ["--routes", routes, "-js", "-sd", str(store)]
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        self.servers = ",".join(f"nats://127.0.0.1:{p}" for p in client)

    @property
    def pids(self) -> dict[str, int]:
        return {f"nats-{i + 1}": p.pid for i, p in enumerate(self.procs)}

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.directory.glob("*.log")))

    def create_stream(self, timeout: float = 60.0) -> None:
        """The R3 stream, retried while the JetStream meta group elects its leader."""

        async def create() -> None:
            import nats

            nc = await nats.connect(self.servers.split(","))
            try:
                js = nc.jetstream()
                await js.add_stream(name=STREAM, subjects=[SUBJECT], num_replicas=3, storage="file")
                await js.publish(SUBJECT, b"ready", timeout=10)
            finally:
                await nc.close()

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise NatsError("a nats-server exited", self.logs())
            try:
                asyncio.run(create())
                return
            except Exception as exc:  # nats-py raises many kinds while electing
                last = exc
                time.sleep(1)
        raise NatsError(f"no R3 stream after {timeout:.0f} s ({last!r})", self.logs())

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def nats_binary() -> str | None:
    return shutil.which("nats-server") or next(
        (b for b in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if Path(b).exists()), None
    )


async def publish(servers: str, seconds: float, subject: str = SUBJECT) -> dict[str, Any]:
    """1 KiB messages to ``subject``, ``INFLIGHT`` publishes each awaiting its
    PubAck (stored on 2 of 3 nodes, as JetStream acknowledges an R3 stream)."""
    import nats

    if subject != SUBJECT and "." not in subject:
        subject = SUBJECT  # the loadgen passes our topic by default
    nc = await nats.connect(servers.split(","))
    js = nc.jetstream()
    latencies: list[float] = []
    sent = errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal sent, errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                await js.publish(subject, BODY, timeout=10)
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)
            sent += 1

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(INFLIGHT)))
    finally:
        elapsed = time.perf_counter() - started
        await nc.close()
    return {
        "messages": sent,
        "seconds": elapsed,
        "msgs_per_s": sent / elapsed,
        "errors": errors,
        **_percentiles(latencies),
    }
