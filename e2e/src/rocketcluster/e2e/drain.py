"""Draining a topic with an official client's SimpleConsumer, the way an application's
receive loop does — receive a batch, acknowledge each message, receive again — while
recording every receive and, for each empty one, whether a master still held messages
the consumer group had not acknowledged (issue #25: empty receives while a master
reported lag). The Python client runs in this process; the Node.js client runs
``e2e/node/drain.mjs`` (``make node-deps`` installs it from the lock file).

The figures are the test's to judge: ``stalled_run`` (the longest run of empty receives
while a master reported lag) and ``rate`` (messages per second of the drain)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression

NODE_DIR = Path(__file__).resolve().parents[3] / "node"
NODE_SCRIPT = NODE_DIR / "drain.mjs"
INVISIBLE_S = 30
BATCH = 32

# Called after an empty receive: the messages the consumer group has not acknowledged
# on every master (its lag), summed.
LagProbe = Callable[[], int]


@dataclass(frozen=True)
class Receive:
    at: float  # seconds since the drain began
    took: float
    ids: tuple[str, ...]
    lag: int | None = None  # after an empty receive: what the masters reported


@dataclass
class Drain:
    receives: list[Receive] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # message ids, first deliveries in order
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    seen: set[str] = field(default_factory=set)

    @property
    def stalled_run(self) -> int:
        """The longest run of empty receives in a row while a master reported lag."""
        longest = run = 0
        for r in self.receives:
            run = run + 1 if not r.ids and (r.lag or 0) > 0 else 0
            longest = max(longest, run)
        return longest

    @property
    def rate(self) -> float:
        """Distinct messages per second, from the drain's start to the receive that
        brought the last new one."""
        last = max((r.at + r.took for r in self.receives if r.ids), default=0.0)
        return len(self.seen) / last if last > 0 else 0.0

    def describe(self) -> str:
        empty = sum(1 for r in self.receives if not r.ids)
        return (
            f"{len(self.seen)} messages in {self.seconds:.1f}s ({self.rate:.0f}/s), "
            f"{len(self.receives)} receives, {empty} empty, longest stall {self.stalled_run}, "
            f"{len(self.errors)} errors"
        )

    def add(self, receive: Receive) -> None:
        self.receives.append(receive)
        for message_id in receive.ids:
            if message_id not in self.seen:
                self.seen.add(message_id)
                self.order.append(message_id)


def drain_python(
    endpoints: str,
    group: str,
    topic: str,
    expected: set[str],
    lag: LagProbe,
    *,
    await_s: int = 3,
    timeout_s: float = 240.0,
) -> Drain:
    """Receive and acknowledge with the official Python SimpleConsumer until every id
    in ``expected`` arrived (or ``timeout_s``)."""
    consumer = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials(), request_timeout=3),
        group,
        {topic: FilterExpression()},
        await_duration=await_s,
    )
    consumer.startup()
    drain = Drain()
    began = time.monotonic()
    try:
        while not expected <= drain.seen and time.monotonic() - began < timeout_s:
            at = time.monotonic()
            try:
                messages = consumer.receive(BATCH, INVISIBLE_S)
            except Exception as exc:  # an application logs it and receives again
                drain.errors.append(str(exc).splitlines()[0][:200] if str(exc) else repr(exc))
                time.sleep(0.2)
                continue
            ids = []
            for message in messages:
                try:
                    consumer.ack(message)
                    ids.append(message.message_id)
                except Exception as exc:  # not acknowledged: it comes back later
                    drain.errors.append(f"ack: {str(exc).splitlines()[0][:200]}")
            took = time.monotonic() - at
            drain.add(Receive(at - began, took, tuple(ids), None if ids else lag()))
    finally:
        drain.seconds = time.monotonic() - began
        consumer.shutdown()
    return drain


def node_available() -> str | None:
    """Why the Node.js client cannot run here (None when it can)."""
    if shutil.which("node") is None:
        return "node is not on PATH: `apt-get install nodejs npm` (or `make node-deps`)"
    if not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        return f"the Node.js client is not installed in {NODE_DIR}: run `make node-deps`"
    return None


def drain_node(
    endpoint: str,
    group: str,
    topic: str,
    expected: set[str],
    lag: LagProbe,
    *,
    await_s: int = 3,
    timeout_s: float = 240.0,
) -> Drain:
    """The same drain with the official Node.js SimpleConsumer (``drain.mjs``), which
    takes one access point (``endpoint``) and learns the other groups from routes."""
    problem = node_available()
    if problem:
        raise RuntimeError(problem)
    args = {
        "endpoints": endpoint,
        "group": group,
        "topic": topic,
        "expected": len(expected),
        "timeoutS": timeout_s,
        "awaitMs": await_s * 1000,
        "batch": BATCH,
        "invisibleMs": INVISIBLE_S * 1000,
    }
    drain = Drain()
    began = time.monotonic()
    process = subprocess.Popen(
        ["node", str(NODE_SCRIPT), json.dumps(args)],
        cwd=NODE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(process.stderr or ()), daemon=True)
    reader.start()
    try:
        for line in process.stdout or ():
            event = json.loads(line)
            if "ids" in event:
                ids = tuple(event["ids"])
                drain.add(Receive(event["at"], event["took"], ids, None if ids else lag()))
            elif "error" in event or "ackError" in event:
                drain.errors.append(str(event.get("error") or event.get("ackError")))
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        drain.seconds = time.monotonic() - began
    reader.join(timeout=10)
    if code != 0:
        raise RuntimeError(f"drain.mjs exited {code}: {''.join(stderr)[-2000:]}")
    return drain
