"""One measured case: the load in a child process, the CPU of every role around it.

The child (``loadgen``) warms up, stops at READY; we read utime+stime of every
process (``/proc/<pid>/stat``, all threads), let it run the measured load, read them
again at END while it waits. CPU per message is the difference over the messages the
client carried in that window — warm-up, start-up and the result's printing apart."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from rocketcluster.ctl.bench.client_bench import TOPIC, _cpu_seconds

CLIENT = "client"
LOADGEN = "rocketcluster.ctl.bench.cpu.loadgen"


class CaseError(RuntimeError):
    """A case whose load process did not follow the protocol: its kind, what it said
    and the end of its stderr."""

    def __init__(self, kind: str, said: str, stderr: str) -> None:
        super().__init__(f"the {kind} load process said {said!r}; stderr ends: {stderr[-800:]}")
        self.kind, self.said, self.stderr = kind, said, stderr


def idle_cores(pids: Mapping[str, int], seconds: float) -> dict[str, float]:
    """CPU seconds per second each role burns with no load (timers, heartbeats,
    polls): what a case's figures carry whatever its message rate."""
    before = cpu_of(pids)
    started = time.perf_counter()
    time.sleep(seconds)
    after = cpu_of(pids)
    wall = time.perf_counter() - started
    return {r: (after[r] - before[r]) / wall for r in before if r in after}


def net_of_idle(result: dict[str, Any], idle: Mapping[str, float]) -> dict[str, float]:
    """A case's CPU µs per message less each role's idle burn over the window (never
    below zero): the cost the messages themselves add."""
    messages = max(1, int(result["messages"]))
    return {
        r: max(0.0, s - idle.get(r, 0.0) * result["window_s"]) * 1e6 / messages
        for r, s in result["cpu_s"].items()
    }


def cpu_of(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each role's process (a process gone counts as absent)."""
    out: dict[str, float] = {}
    for role, pid in pids.items():
        try:
            out[role] = _cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


@dataclass
class Window:
    """Hooks around the measured window, each given the role -> pid map with the
    client: ``on_ready`` before the first CPU snapshot and ``on_done`` after the
    second (reads of the cluster, outside the figures), ``on_start`` after the first
    and ``on_end`` before the second (py-spy attaches and detaches there)."""

    on_ready: Callable[[dict[str, int]], None] | None = None
    on_start: Callable[[dict[str, int]], None] | None = None
    on_end: Callable[[dict[str, int]], None] | None = None
    on_done: Callable[[dict[str, int]], None] | None = None


def run_case(
    kind: str,
    endpoint: str,
    seconds: float,
    pids: Mapping[str, int],
    *,
    warmup: float = 1.0,
    topic: str = TOPIC,
    window: Window | None = None,
    clients: int = 1,
) -> dict[str, Any]:
    """Run ``kind`` against ``endpoint`` in ``clients`` child processes for
    ``seconds``: the client's result plus ``cpu_s`` (CPU seconds of each role in the
    window, the clients included) and ``cpu_us_per_msg``. With several clients the
    results add up (messages, msgs/s), the p99 is the worst client's, and each
    client's CPU is a role of its own (``client-1`` …) beside their sum (``client``)."""
    window = window or Window()
    with contextlib.ExitStack() as stack:
        stderrs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(clients)]
        return _run(kind, endpoint, seconds, pids, warmup, topic, window, stderrs)


def _run(
    kind: str,
    endpoint: str,
    seconds: float,
    pids: Mapping[str, int],
    warmup: float,
    topic: str,
    window: Window,
    stderrs: Sequence[IO[str]],
) -> dict[str, Any]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", LOADGEN, kind, endpoint, str(seconds), str(warmup), topic],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        for stderr in stderrs
    ]
    names = [CLIENT] if len(procs) == 1 else [f"{CLIENT}-{n}" for n in range(1, len(procs) + 1)]
    try:
        everyone = {**pids, **{name: p.pid for name, p in zip(names, procs, strict=True)}}
        for proc, stderr in zip(procs, stderrs, strict=True):
            _expect(proc, stderr, kind, "READY")
        if window.on_ready:
            window.on_ready(everyone)
        before = cpu_of(everyone)
        started = time.perf_counter()
        if window.on_start:
            window.on_start(everyone)
        _tell(procs, "GO")
        for proc, stderr in zip(procs, stderrs, strict=True):
            _expect(proc, stderr, kind, "END")
        if window.on_end:
            window.on_end(everyone)
        after = cpu_of(everyone)
        wall = time.perf_counter() - started
        if window.on_done:
            window.on_done(everyone)
        _tell(procs, "OK")
        results: list[dict[str, Any]] = []
        for proc, stderr in zip(procs, stderrs, strict=True):
            line = _expect(proc, stderr, kind, "RESULT ")
            results.append(json.loads(line.removeprefix("RESULT ")))
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    result = results[0] if len(results) == 1 else combined(results)
    cpu = {r: after[r] - before[r] for r in before if r in after}
    each = set(names) - {CLIENT}  # several clients: counted once, in their sum
    if each:
        cpu[CLIENT] = sum(cpu.get(name, 0.0) for name in names)
    messages = max(1, int(result["messages"]))
    result.update(
        {
            "window_s": wall,
            "cpu_s": cpu,
            "cpu_us_per_msg": {r: s * 1e6 / messages for r, s in cpu.items()},
            "cpu_us_per_msg_total": sum(v for r, v in cpu.items() if r not in each)
            * 1e6
            / messages,
            "cpu_cores": {r: s / max(1e-9, wall) for r, s in cpu.items()},
        }
    )
    return result


def combined(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several clients' results as one load's: counts and rates add up, the latency
    percentiles are the worst client's (no client saw worse)."""
    out: dict[str, Any] = {
        "clients": len(results),
        "messages": sum(int(r["messages"]) for r in results),
        "msgs_per_s": sum(float(r["msgs_per_s"]) for r in results),
        "errors": sum(int(r.get("errors", 0)) for r in results),
        "per_client": results,
    }
    for key in ("p50_ms", "p99_ms"):
        out[key] = max(float(r.get(key, 0.0)) for r in results)
    out["seconds"] = max(float(r.get("seconds", 0.0)) for r in results)
    return out


def _tell(procs: list[subprocess.Popen[str]], word: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(word + "\n")
        proc.stdin.flush()


def _expect(proc: subprocess.Popen[str], stderr: IO[str], kind: str, prefix: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        proc.wait()
        stderr.seek(0)
        raise CaseError(kind, line, stderr.read())
    return line.strip()
