"""The chaos workload: producers and consumers that write down everything.

Lean-client producers (asyncio, one thread) send to each broker group's endpoint:
NORMAL messages, and FIFO messages in several message groups, one in flight per
message group so its order is the order of acknowledgement. Official-client
producers (threads) send NORMAL messages the way applications do, retries and all.
Consumers (lean client, acking) read both topics from every group endpoint. Each
operation is an invoke and an ok/fail/info in the history; after an ``info`` the
worker continues as a new process with a new connection, as Jepsen's workers do, so
a stalled connection never hides the recovery. The final ``audit`` reads every queue
from its first offset with a consumer group nobody used before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.client.lean_message import LeanMessage
from rocketcluster.ctl.chaos.history import FAIL, INFO, INVOKE, OK, History

log = logging.getLogger("rocketcluster.chaos")

NORMAL_TOPIC = "chaos-normal"
FIFO_TOPIC = "chaos-fifo"
NORMAL_GROUP = "chaos-normal-cg"
FIFO_GROUP = "chaos-fifo-cg"
AUDIT_GROUP = "chaos-audit"


@dataclass
class WorkloadConfig:
    endpoints: dict[str, str]  # broker group -> its client endpoint
    normal_producers: int = 2  # per broker group
    message_groups: int = 4  # FIFO message groups per broker group
    official_producers: int = 1  # over all groups
    rate: float = 12.0  # messages per second per producer
    send_timeout_s: float = 5.0
    invisible_ms: int = 5000
    body_bytes: int = 200


def _definite(code: int) -> bool:
    """A 4xx status: the broker refused the request before storing anything. Every
    other failure (replication timeout, not master now, internal) may still have
    stored the message, so it is indeterminate."""
    return 40000 <= code < 50000


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details() or ''}"[:160]
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


class Workload:
    def __init__(self, config: WorkloadConfig, history: History) -> None:
        self.config = config
        self.history = history
        self._pids = itertools.count(1)
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        # One event loop, in its own thread, for every lean-client coroutine of the
        # run, the audit included: grpc.aio does not like a second loop per process.
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="chaos-workload", daemon=True
        )
        self._main: concurrent.futures.Future[None] | None = None
        self.last_delivery = time.monotonic()
        self.acked: dict[str, set[str]] = {NORMAL_TOPIC: set(), FIFO_TOPIC: set()}

    def new_process(self) -> int:
        return next(self._pids)

    # -- control ------------------------------------------------------------------

    def start(self) -> None:
        self._loop_thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        endpoints = ";".join(self.config.endpoints.values())
        for w in range(self.config.official_producers):
            t = threading.Thread(target=self._official_producer, args=(w, endpoints), daemon=True)
            t.start()
            self._threads.append(t)

    def stop_producers(self) -> None:
        self._stop_producing.set()

    def drain(self, quiet_s: float, timeout_s: float) -> bool:
        """Keep consuming until nothing was delivered for ``quiet_s`` (longer than the
        invisible time, so unacknowledged deliveries have come back), then stop."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if time.monotonic() - self.last_delivery >= quiet_s:
                break
            time.sleep(0.2)
        quiet = time.monotonic() - self.last_delivery >= quiet_s
        self._stop_consuming.set()
        if self._main is not None:
            self._main.result(timeout=60)
        for t in self._threads:
            t.join(timeout=30)
        return quiet

    def close(self) -> None:
        self._stop_producing.set()
        self._stop_consuming.set()
        if self._loop_thread.is_alive():
            if self._main is not None:
                with contextlib.suppress(Exception):
                    self._main.result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=30)
        if not self._loop.is_running():
            self._loop.close()

    async def _run(self) -> None:
        tasks: list[Coroutine[Any, Any, None]] = []
        mg = 0
        for bgroup, endpoint in self.config.endpoints.items():
            for _ in range(self.config.normal_producers):
                tasks.append(self._producer(bgroup, endpoint, NORMAL_TOPIC, None, len(tasks)))
            for _ in range(self.config.message_groups):
                tasks.append(self._producer(bgroup, endpoint, FIFO_TOPIC, f"mg{mg}", len(tasks)))
                mg += 1
            tasks.append(self._consumer(bgroup, endpoint, NORMAL_TOPIC, NORMAL_GROUP, "receive"))
            tasks.append(self._consumer(bgroup, endpoint, FIFO_TOPIC, FIFO_GROUP, "receive"))
        await asyncio.gather(*tasks)

    # -- producing -------------------------------------------------------------------

    async def _producer(
        self, bgroup: str, endpoint: str, topic: str, mgroup: str | None, worker: int
    ) -> None:
        cfg = self.config
        process = self.new_process()
        client = LeanClient(endpoint, timeout=cfg.send_timeout_s)
        letter = "F" if mgroup else "N"
        period = 1.0 / cfg.rate
        due = time.monotonic()
        try:
            for seq in itertools.count():
                if self._stop_producing.is_set():
                    break
                mid = f"{letter}{worker}-{seq}"
                fields = {
                    "id": mid,
                    "topic": topic,
                    "bgroup": bgroup,
                    "seq": seq,
                    "worker": f"{letter}{worker}",
                }
                if mgroup:
                    fields["mgroup"] = mgroup
                body = f"{mid}|{mgroup or ''}|{seq}|".encode().ljust(cfg.body_bytes, b".")
                self.history.append(INVOKE, "send", process=process, **fields)
                kind, extra = await self._send(client, topic, body, mid, mgroup)
                self.history.append(kind, "send", process=process, **fields, **extra)
                if kind == OK:
                    self.acked[topic].add(mid)
                elif kind == INFO:
                    process = self.new_process()
                    await client.close()
                    client = LeanClient(endpoint, timeout=cfg.send_timeout_s)
                due = max(due + period, time.monotonic() - 1.0)
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        finally:
            await client.close()

    async def _send(
        self, client: LeanClient, topic: str, body: bytes, mid: str, mgroup: str | None
    ) -> tuple[str, dict[str, object]]:
        out = OutgoingMessage(body, message_id=mid, message_group=mgroup or "")
        try:
            [entry] = await client.send(topic, [out])
        except LeanClientError as exc:
            return (FAIL if _definite(exc.code) else INFO), {"error": _error_text(exc)}
        except Exception as exc:
            return INFO, {"error": _error_text(exc)}
        code = entry.status.code
        if code == pb.Code.OK:
            return OK, {"offset": entry.offset}
        kind = FAIL if _definite(code) else INFO
        return kind, {"error": f"{pb.Code.Name(code)}: {entry.status.message}"[:160]}

    def _official_producer(self, w: int, endpoints: str) -> None:
        from rocketmq.v5.client import ClientConfiguration, Credentials
        from rocketmq.v5.model import Message
        from rocketmq.v5.producer import Producer

        producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3), (NORMAL_TOPIC,)
        )
        producer.startup()
        process = self.new_process()
        period = 1.0 / self.config.rate
        try:
            for seq in itertools.count():
                if self._stop_producing.is_set():
                    break
                started = time.monotonic()
                mid = f"O{w}-{seq}"
                msg = Message()
                msg.topic = NORMAL_TOPIC
                msg.body = f"{mid}||{seq}|".encode().ljust(self.config.body_bytes, b".")
                self.history.append(
                    INVOKE,
                    "send",
                    process=process,
                    id=mid,
                    topic=NORMAL_TOPIC,
                    seq=seq,
                    worker=f"O{w}",
                )
                try:
                    receipt = producer.send(msg)
                except Exception as exc:  # retried inside the client: never definite
                    self.history.append(
                        INFO,
                        "send",
                        process=process,
                        id=mid,
                        topic=NORMAL_TOPIC,
                        error=_error_text(exc),
                    )
                    process = self.new_process()
                else:
                    bgroup = str(receipt.message_queue).split(".")[0]
                    self.history.append(
                        OK,
                        "send",
                        process=process,
                        id=mid,
                        topic=NORMAL_TOPIC,
                        seq=seq,
                        bgroup=bgroup,
                        offset=int(receipt.offset),
                    )
                    self.acked[NORMAL_TOPIC].add(mid)
                time.sleep(max(0.0, period - (time.monotonic() - started)))
        finally:
            with contextlib.suppress(Exception):
                producer.shutdown()

    # -- consuming ---------------------------------------------------------------------

    async def _consumer(self, bgroup: str, endpoint: str, topic: str, cg: str, f: str) -> None:
        await self.consume(
            bgroup, endpoint, topic, cg, f, lambda empties: self._stop_consuming.is_set()
        )

    async def consume(
        self,
        bgroup: str,
        endpoint: str,
        topic: str,
        cg: str,
        f: str,
        stop: Callable[[int], bool],
        seen: set[str] | None = None,
        batch: int = 32,
    ) -> None:
        """Receive-and-ack until ``stop(empty receives in a row)``; delivered ids go
        into ``seen`` too when given."""
        process = self.new_process()
        client = LeanClient(endpoint, timeout=5.0)
        empty = 0
        common = {"topic": topic, "bgroup": bgroup, "cg": cg}
        try:
            while not stop(empty):
                self.history.append(INVOKE, f, process=process, **common)
                try:
                    got = await client.receive(
                        cg, topic, batch=batch, invisible_ms=self.config.invisible_ms, poll_ms=1000
                    )
                except Exception as exc:
                    kind = (
                        FAIL if isinstance(exc, LeanClientError) and _definite(exc.code) else INFO
                    )
                    self.history.append(kind, f, process=process, error=_error_text(exc), **common)
                    with contextlib.suppress(Exception):
                        await client.close()
                    process = self.new_process()
                    client = LeanClient(endpoint, timeout=5.0)
                    await asyncio.sleep(0.3)
                    continue
                if not got:
                    empty += 1
                    self.history.append(OK, f, process=process, count=0, **common)
                    continue
                empty = 0
                self.last_delivery = time.monotonic()
                for msg in got:
                    sp = msg.system_properties
                    mid = msg.body.split(b"|", 1)[0].decode(errors="replace")
                    if seen is not None:
                        seen.add(mid)
                    self.history.append(
                        OK,
                        f,
                        process=process,
                        id=mid,
                        mgroup=sp.message_group,
                        queue=sp.queue_id,
                        offset=sp.queue_offset,
                        attempt=sp.delivery_attempt,
                        **common,
                    )
                process = await self._ack(client, process, cg, topic, got, common)
        finally:
            await client.close()

    async def _ack(
        self,
        client: LeanClient,
        process: int,
        cg: str,
        topic: str,
        got: list[LeanMessage],
        common: Mapping[str, object],
    ) -> int:
        self.history.append(INVOKE, "ack", process=process, count=len(got), **common)
        try:
            entries = await client.ack(cg, topic, got)
        except Exception as exc:
            self.history.append(INFO, "ack", process=process, error=_error_text(exc), **common)
            return self.new_process()
        failed = [e for e in entries if e.status.code != pb.Code.OK]
        if failed:
            self.history.append(
                FAIL,
                "ack",
                process=process,
                count=len(failed),
                error=failed[0].status.message[:160],
                **common,
            )
        else:
            self.history.append(OK, "ack", process=process, count=len(got), **common)
        return process

    # -- the final audit -----------------------------------------------------------------

    def audit(self, timeout_s: float, want: dict[str, set[str]] | None = None) -> bool:
        """Read both topics on every group endpoint with a consumer group nobody used
        before — so from each queue's first offset — until every wanted id (per topic)
        was seen and each reader had several empty receives in a row, or until
        ``timeout_s``. Returns whether it finished before the deadline."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout_s
        wanted = want or {}

        def stop_for(topic: str) -> Callable[[int], bool]:
            def stop(empties: int) -> bool:
                if time.monotonic() > deadline:
                    return True
                return empties >= 3 and wanted.get(topic, set()) <= seen

            return stop

        async def main() -> None:
            await asyncio.gather(
                *(
                    self.consume(
                        bgroup, endpoint, topic, AUDIT_GROUP, "audit", stop_for(topic), seen, 64
                    )
                    for bgroup, endpoint in self.config.endpoints.items()
                    for topic in (NORMAL_TOPIC, FIFO_TOPIC)
                )
            )

        asyncio.run_coroutine_threadsafe(main(), self._loop).result(timeout=timeout_s + 60)
        return time.monotonic() <= deadline
