"""The client side of a ``bench cpu`` case, in its own process so its CPU is its own.

``python -m rocketcluster.ctl.bench.cpu.loadgen KIND ENDPOINT SECONDS WARMUP [TOPIC]``

It warms up (the same load for WARMUP seconds, not measured), then speaks a line
protocol on its stdout with the parent, which snapshots the CPU of every process
while this one is idle between the lines:

    READY   -> the parent snapshots CPU, answers GO on our stdin
    (the measured load runs for SECONDS)
    END     -> the parent snapshots CPU again, answers OK
    RESULT {json}

Everything else the libraries print goes to stderr, so the protocol stays clean.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from rocketcluster.ctl.bench.client_bench import (
    TOPIC,
    lean_consume,
    lean_produce,
    official_consume,
    official_produce,
    transport_limit,
)
from rocketcluster.ctl.testing import quiet_official_client

KINDS = (
    "lean_produce",
    "official_produce",
    "official_consume",
    "lean_consume",
    "raw_unary",
    "raw_stream",
    "raw_fetch",
    "nats_publish",
)


def run_kind(kind: str, endpoint: str, seconds: float, topic: str) -> dict[str, Any]:
    """One run of ``kind`` for ``seconds``: the client's own result dict."""
    if kind == "lean_produce":
        return asyncio.run(lean_produce(endpoint, seconds, topic))
    if kind == "official_produce":
        return official_produce(endpoint, seconds, topic)
    if kind == "official_consume":
        return official_consume(endpoint, seconds, None, topic=topic)
    if kind == "lean_consume":
        return asyncio.run(lean_consume(endpoint, seconds, None))
    if kind in ("raw_unary", "raw_stream", "raw_fetch"):
        return transport_limit(endpoint, seconds, cases=(kind,))[kind]
    if kind == "nats_publish":
        from rocketcluster.ctl.bench.cpu.nats import publish

        return asyncio.run(publish(endpoint, seconds, topic))
    raise ValueError(f"unknown load kind {kind!r}; one of {', '.join(KINDS)}")


def main(argv: list[str]) -> None:
    kind, endpoint, seconds, warmup = argv[0], argv[1], float(argv[2]), float(argv[3])
    topic = argv[4] if len(argv) > 4 else TOPIC
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # libraries' prints go to stderr
    quiet_official_client()
    if warmup > 0:
        run_kind(kind, endpoint, warmup, topic)

    def say(line: str) -> None:
        protocol.write(line + "\n")
        protocol.flush()

    say("READY")
    if sys.stdin.readline().strip() != "GO":
        return
    result = run_kind(kind, endpoint, seconds, topic)
    say("END")
    sys.stdin.readline()
    say("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
