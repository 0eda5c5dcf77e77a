"""One broker group's probe, and the metrics every probe reports to.

A probe sends one message through the group's client endpoint — what an application
reaches: the Service (or the local group endpoint) that follows the master — then
receives with the canary's consumer group until that message comes back, and
acknowledges everything it received. Its results:

- ``ok``: the message came back; the time from before the send to its arrival is
  observed in ``rocketmq_canary_e2e_latency_seconds``;
- ``send_error``: the send failed or was refused (no master, an unreachable or
  stopped broker, a refused write, an ACL);
- ``receive_timeout``: the send succeeded but the message was not received within
  the timeout.

A group that is write-disabled — drained for a scale-in — refuses the send with a
message that says so: that probe is skipped (printed, not counted), so a drain does
not page anyone. Messages of earlier probes that come back late (a send that failed
after the broker stored it, a probe that timed out) are acknowledged and ignored.

Receives go over LeanClient's ReceiveBatch, which a broker answers from its own
queues only (the official ReceiveMessage may be answered by another group when this
one has nothing: messaging/cross_group.py); each message is also tagged with its
group, and the receive filters on that tag, so a probe only ever measures its own
group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import (
    LeanClient,
    LeanClientError,
    OutgoingMessage,
    new_message_id,
)
from rocketcluster.api.client.lean_message import LeanMessage
from rocketcluster.api.tls import ClientTls

log = logging.getLogger("rocketcluster.canary")

OK: Final = "ok"
SEND_ERROR: Final = "send_error"
RECEIVE_TIMEOUT: Final = "receive_timeout"
SKIPPED: Final = "skipped"  # the group takes no writes (drained): not counted
RESULTS: Final = (OK, SEND_ERROR, RECEIVE_TIMEOUT)
# The success ratio is over this many most recent probes of a group.
WINDOW: Final = 12
LATENCY_BUCKETS: Final = (
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# The user property that marks a canary message with the process that sent it.
SENDER_PROPERTY: Final = "rocketcluster-canary"
RECEIVE_BATCH: Final = 16
# A received message stays invisible this long unless acknowledged (a canary that
# dies between the two sees it again, as an old message, in half a minute).
INVISIBLE_MS: Final = 30_000
LONG_POLL_MAX_S: Final = 3.0
WRITE_DISABLED: Final = "write-disabled"


class CanaryMetrics:
    """The canary's series, labelled ``cluster`` and ``group`` (the broker group
    probed), in a registry of their own (``/metrics`` serves it)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ("cluster", "group")
        self.latency = Histogram(
            "rocketmq_canary_e2e_latency_seconds",
            "Time from before a canary message is sent through a broker group's client "
            "endpoint until it is received back (successful probes)",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.probes = Counter(
            "rocketmq_canary_probes",
            "Canary probes of a broker group, by result: ok, send_error, receive_timeout",
            (*labels, "result"),
            registry=self.registry,
        )
        self.ratio = Gauge(
            "rocketmq_canary_success_ratio",
            f"Share of the last {WINDOW} canary probes of a broker group that succeeded",
            labels,
            registry=self.registry,
        )
        self.last_success = Gauge(
            "rocketmq_canary_last_success_timestamp_seconds",
            "Unix time of the last successful canary probe of a broker group",
            labels,
            registry=self.registry,
        )

    def add_group(self, cluster: str, group: str) -> None:
        """Every result's series at 0 from the start: a group whose probes never
        succeed still has an ``ok`` series whose increase is 0 (what the alert reads)."""
        for result in RESULTS:
            self.probes.labels(cluster, group, result)

    def remove_group(self, cluster: str, group: str) -> None:
        """A group no longer probed (scaled in, or another config): its series go."""
        for result in RESULTS:
            with contextlib.suppress(KeyError):
                self.probes.remove(cluster, group, result)
        for metric in (self.latency, self.ratio, self.last_success):
            with contextlib.suppress(KeyError):
                metric.remove(cluster, group)


@dataclass(frozen=True)
class ProbeTarget:
    """Everything one group's probe needs; a change of any of it restarts the probe."""

    cluster: str
    group: str
    endpoint: str
    topic: str
    consumer_group: str
    interval_s: float
    timeout_s: float
    ca_file: Path | None = None
    access_key: str | None = None
    secret_key_file: Path | None = None


@dataclass(frozen=True)
class ProbeResult:
    result: str
    seconds: float
    detail: str = ""


def describe_error(exc: BaseException) -> str:
    """A failed call in one line: the gRPC status and its details, or the broker's
    answer."""
    if isinstance(exc, grpc.aio.AioRpcError):
        details = (exc.details() or "").replace("\n", " ")
        return f"{exc.code().name}: {details[:200]}"
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc}"
    return str(exc)[:300]


def _refused(code: int, message: str, seconds: float) -> ProbeResult:
    """A send the broker answered with ``code``: a drained group's refusal is a skip,
    anything else a send_error."""
    detail = f"SendMessage: {pb.Code.Name(code)}: {message}"
    if code == pb.Code.FORBIDDEN and WRITE_DISABLED in message:
        return ProbeResult(SKIPPED, seconds, f"the group is drained, not probed ({detail})")
    return ProbeResult(SEND_ERROR, seconds, detail)


class GroupProbe:
    """Probes one group every ``interval_s`` (the next starts when the last is done
    and the interval has passed) until cancelled."""

    def __init__(
        self,
        target: ProbeTarget,
        metrics: CanaryMetrics,
        *,
        sender: str,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.target = target
        self.metrics = metrics
        self.sender = sender
        self.echo = echo
        self.recent: deque[bool] = deque(maxlen=WINDOW)
        self.last: ProbeResult | None = None
        self.counts: dict[str, int] = dict.fromkeys((*RESULTS, SKIPPED), 0)
        self._client: LeanClient | None = None
        self._client_key: str | None = None
        self._closing: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        t = self.target
        self.metrics.add_group(t.cluster, t.group)
        try:
            while True:
                started = time.monotonic()
                outcome = await self.probe()
                self.record(outcome)
                await asyncio.sleep(max(0.0, started + t.interval_s - time.monotonic()))
        finally:
            await self.close()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.close()

    def record(self, outcome: ProbeResult) -> None:
        t = self.target
        self.last = outcome
        self.counts[outcome.result] += 1
        if outcome.result != SKIPPED:
            self.metrics.probes.labels(t.cluster, t.group, outcome.result).inc()
            self.recent.append(outcome.result == OK)
            self.metrics.ratio.labels(t.cluster, t.group).set(sum(self.recent) / len(self.recent))
        if outcome.result == OK:
            self.metrics.latency.labels(t.cluster, t.group).observe(outcome.seconds)
            self.metrics.last_success.labels(t.cluster, t.group).set(time.time())
        self.echo(self.line(outcome))

    def line(self, outcome: ProbeResult) -> str:
        """What the console shows for one probe: one line per group and probe."""
        stamp = time.strftime("%H:%M:%S")
        ok = sum(self.recent)
        ratio = f"({ok}/{len(self.recent)} ok)" if self.recent else ""
        if outcome.result == OK:
            what = f"ok {outcome.seconds * 1000:7.1f} ms"
        else:
            what = f"{outcome.result} after {outcome.seconds:.1f} s: {outcome.detail}"
        return f"{stamp} {self.target.group:<24} {what} {ratio}".rstrip()

    def _credentials(self) -> tuple[str, str] | None:
        t = self.target
        if t.access_key is None or t.secret_key_file is None:
            return None
        return (t.access_key, t.secret_key_file.read_text().strip())

    def client(self) -> LeanClient:
        """The group's client, made again when the secret key file changes (a
        rotated Secret)."""
        t = self.target
        credentials = self._credentials()
        key = credentials[1] if credentials else None
        if self._client is None or key != self._client_key:
            old = self._client
            if old is not None:  # closed beside: a call may still use it
                closing = asyncio.get_running_loop().create_task(old.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            tls = ClientTls(ca_file=t.ca_file) if t.ca_file is not None else None
            self._client = LeanClient(
                t.endpoint,
                client_id=f"canary-{t.group}-{os.getpid()}",
                timeout=t.timeout_s,
                tls=tls,
                credentials=credentials,
            )
            self._client_key = key
        return self._client

    async def probe(self) -> ProbeResult:
        t = self.target
        started = time.monotonic()
        deadline = started + t.timeout_s

        def took() -> float:
            return time.monotonic() - started

        try:
            client = self.client()
        except OSError as exc:  # the secret key file
            return ProbeResult(SEND_ERROR, took(), f"credentials: {describe_error(exc)}")
        message_id = new_message_id()
        body = json.dumps(
            {"id": message_id, "group": t.group, "sender": self.sender, "sentAt": time.time()}
        ).encode()
        message = OutgoingMessage(
            body,
            tag=t.group,
            keys=[message_id],
            properties={SENDER_PROPERTY: self.sender},
            message_id=message_id,
        )
        try:
            async with asyncio.timeout(t.timeout_s):
                (entry,) = await client.send(t.topic, [message])
        except LeanClientError as exc:  # the request refused as a whole
            return _refused(exc.code, exc.message, took())
        except (grpc.aio.AioRpcError, TimeoutError, OSError) as exc:
            return ProbeResult(SEND_ERROR, took(), describe_error(exc))
        if entry.status.code != pb.Code.OK:
            return _refused(entry.status.code, entry.status.message, took())
        last_error = ""
        while (remaining := deadline - time.monotonic()) > 0:
            poll_ms = int(1000 * min(LONG_POLL_MAX_S, max(0.1, remaining - 0.2)))
            try:
                async with asyncio.timeout(remaining):
                    received = await client.receive(
                        t.consumer_group,
                        t.topic,
                        batch=RECEIVE_BATCH,
                        invisible_ms=INVISIBLE_MS,
                        poll_ms=poll_ms,
                        tag=t.group,
                    )
            except (grpc.aio.AioRpcError, LeanClientError, OSError) as exc:
                last_error = describe_error(exc)
                await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            except TimeoutError:
                break
            arrived = took()
            if received:
                await self._ack(client, received)
            if any(m.message_id == message_id for m in received):
                return ProbeResult(OK, arrived)
        detail = f"the message did not come back within {t.timeout_s:g} s"
        if last_error:
            detail += f" (last receive error: {last_error})"
        return ProbeResult(RECEIVE_TIMEOUT, took(), detail)

    async def _ack(self, client: LeanClient, received: list[LeanMessage]) -> None:
        """Acknowledge what was received (this probe's message and older ones alike);
        a failed ack only makes an old message come back later, to be acked again."""
        t = self.target
        try:
            async with asyncio.timeout(t.timeout_s):
                await client.ack(t.consumer_group, t.topic, received)
        except (grpc.aio.AioRpcError, LeanClientError, TimeoutError, OSError) as exc:
            log.debug("ack on %s failed: %s", t.group, describe_error(exc))
