"""The chaos workload: producers and consumers that write down everything.

Lean-client producers (asyncio, one thread) send to each broker group's endpoint:
NORMAL messages, and FIFO messages in several message groups, one in flight per
message group so its order is the order of acknowledgement.
Consumers (lean client, acking) read both topics from every group endpoint. The
official clients have a topic of their own per message type the checker
understands: official-client producers (threads) send NORMAL messages to one and
FIFO messages to the other (several message groups, one send in flight per group:
the thread sends them one at a time, so a group's order is the order of
acknowledgement) the way applications do, retries and all; an official SimpleConsumer
(a thread, POP) reads each topic through all endpoints with a consumer group of its
own — a FIFO group for the FIFO topic, whose order the broker keeps for POP receives
— choosing a group per receive as that client does, at a rate one such consumer
keeps up with on a loaded machine, so a backlog after a fault means a stall, not a
consumer too slow for its producers. Each operation is an invoke and an
ok/fail/info in the history; an ack's completion lists the positions whose ack
succeeded (``acked``: [[id, broker group, queue, offset], ...]), so the checker can
tell a delivery after a successful ack. After an ``info`` the worker continues as a
new process with a new connection, as Jepsen's workers do, so a stalled connection
never hides the recovery. The final ``audit`` reads every queue from its first
offset with a consumer group nobody used before.

Sessions: ``WorkloadConfig.session`` prefixes every message id (and so every body
marker and official-client key), every message group and every process id, so a run
resumed by a new process appending to the same history never reuses one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.client.lean_message import LeanMessage
from rocketcluster.ctl.chaos.history import FAIL, INFO, INVOKE, OK, History

log = logging.getLogger("rocketcluster.chaos")

NORMAL_TOPIC = "chaos-normal"
OFFICIAL_TOPIC = "chaos-official"
FIFO_TOPIC = "chaos-fifo"
NORMAL_GROUP = "chaos-normal-cg"
FIFO_GROUP = "chaos-fifo-cg"
AUDIT_GROUP = "chaos-audit"
OFFICIAL_GROUP = "chaos-official-cg"
OFFICIAL_FIFO_TOPIC = "chaos-official-fifo"
OFFICIAL_FIFO_GROUP = "chaos-official-fifo-cg"  # a FIFO consumer group
# What each consumer group reads: the drain check after every fault watches these.
SUBSCRIPTIONS = (
    (NORMAL_GROUP, NORMAL_TOPIC),
    (FIFO_GROUP, FIFO_TOPIC),
    (OFFICIAL_GROUP, OFFICIAL_TOPIC),
    (OFFICIAL_FIFO_GROUP, OFFICIAL_FIFO_TOPIC),
)
TOPICS = (NORMAL_TOPIC, FIFO_TOPIC, OFFICIAL_TOPIC, OFFICIAL_FIFO_TOPIC)
# Process ids of session N start at N * this (ids within one session stay below it).
SESSION_PROCESSES = 1_000_000


@dataclass
class WorkloadConfig:
    endpoints: dict[str, str]  # broker group -> its client endpoint
    normal_producers: int = 2  # per broker group
    message_groups: int = 4  # FIFO message groups per broker group
    official_producers: int = 1  # NORMAL, over all groups
    official_consumers: int = 1  # SimpleConsumers of OFFICIAL_GROUP, over all groups
    official_fifo_producers: int = 1  # FIFO, over all groups
    official_fifo_groups: int = 4  # message groups per official FIFO producer
    official_fifo_consumers: int = 1  # SimpleConsumers of OFFICIAL_FIFO_GROUP
    rate: float = 12.0  # messages per second per producer
    send_timeout_s: float = 5.0
    invisible_ms: int = 5000
    body_bytes: int = 200
    # Namespaces ids, message groups and process ids: a resumed run takes the next one.
    session: int = 0


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
        self._pids = itertools.count(config.session * SESSION_PROCESSES + 1)
        self.prefix = f"s{config.session}-"  # of every message id and message group
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
        self.acked: dict[str, set[str]] = {topic: set() for topic in TOPICS}
        # Producers send while this is set (the drain check after a fault clears it);
        # ``_sending`` counts the sends they have started and not seen completed.
        self._producing = threading.Event()
        self._producing.set()
        self._sending = 0
        self._sending_lock = threading.Lock()

    def new_process(self) -> int:
        return next(self._pids)

    # -- control ------------------------------------------------------------------

    def start(self) -> None:
        self._loop_thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        cfg = self.config
        endpoints = ";".join(cfg.endpoints.values())
        workers: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        for w in range(cfg.official_producers):
            workers.append((self._official_producer, (f"O{w}", endpoints, OFFICIAL_TOPIC, [])))
        for w in range(cfg.official_fifo_producers):
            groups = [f"{self.prefix}omg{w}-{g}" for g in range(cfg.official_fifo_groups)]
            workers.append(
                (self._official_producer, (f"OF{w}", endpoints, OFFICIAL_FIFO_TOPIC, groups))
            )
        for _ in range(cfg.official_consumers):
            workers.append((self._official_consumer, (endpoints, OFFICIAL_TOPIC, OFFICIAL_GROUP)))
        for _ in range(cfg.official_fifo_consumers):
            workers.append(
                (self._official_consumer, (endpoints, OFFICIAL_FIFO_TOPIC, OFFICIAL_FIFO_GROUP))
            )
        for target, args in workers:
            t = threading.Thread(target=target, args=args, daemon=True)
            t.start()
            self._threads.append(t)

    def stop_producers(self) -> None:
        self._stop_producing.set()

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        with self._sending_lock:
            self._sending += 1
        try:
            yield
        finally:
            with self._sending_lock:
                self._sending -= 1

    @contextlib.contextmanager
    def producers_paused(self) -> Iterator[None]:
        """No new sends while the block runs; it starts once the sends already started
        have completed (or timed out), so what the consumers must catch up on is fixed."""
        self._producing.clear()
        try:
            deadline = time.monotonic() + self.config.send_timeout_s + 5.0
            while self._sending and time.monotonic() < deadline:
                time.sleep(0.05)
            yield
        finally:
            self._producing.set()

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
                mgroup = f"{self.prefix}mg{mg}"
                tasks.append(self._producer(bgroup, endpoint, FIFO_TOPIC, mgroup, len(tasks)))
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
                while not self._producing.is_set() and not self._stop_producing.is_set():
                    await asyncio.sleep(0.05)
                    due = time.monotonic()
                if self._stop_producing.is_set():
                    break
                mid = f"{self.prefix}{letter}{worker}-{seq}"
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
                with self._in_flight():
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

    def _official_producer(
        self, worker: str, endpoints: str, topic: str, mgroups: list[str]
    ) -> None:
        """Send with the official Producer until told to stop: NORMAL messages when
        ``mgroups`` is empty, otherwise FIFO messages to each message group in turn —
        one send at a time, so one in flight per group and its order is the order of
        acknowledgement (the client picks the queue by a hash of the group)."""
        from rocketmq.v5.client import ClientConfiguration, Credentials
        from rocketmq.v5.producer import Producer

        producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,)
        )
        producer.startup()
        process = self.new_process()
        period = 1.0 / self.config.rate
        seqs = dict.fromkeys(mgroups, 0)
        try:
            for n in itertools.count():
                while not self._producing.wait(0.1) and not self._stop_producing.is_set():
                    pass
                if self._stop_producing.is_set():
                    break
                mgroup = mgroups[n % len(mgroups)] if mgroups else ""
                seq = seqs[mgroup] if mgroup else n
                if mgroup:
                    seqs[mgroup] += 1
                started = time.monotonic()
                with self._in_flight():
                    process = self._official_send(producer, worker, topic, mgroup, seq, process)
                time.sleep(max(0.0, period - (time.monotonic() - started)))
        finally:
            with contextlib.suppress(Exception):
                producer.shutdown()

    def _official_send(
        self, producer: Any, worker: str, topic: str, mgroup: str, seq: int, process: int
    ) -> int:
        """One send of the official producer, recorded; returns the process to go on
        as (a new one after an indeterminate outcome)."""
        from rocketmq.v5.model import Message

        # A FIFO message's id names its message group (already session-prefixed).
        mid = f"{mgroup}-{seq}" if mgroup else f"{self.prefix}{worker}-{seq}"
        msg = Message()
        msg.topic = topic
        msg.keys = mid
        if mgroup:
            msg.message_group = mgroup
        msg.body = f"{mid}|{mgroup}|{seq}|".encode().ljust(self.config.body_bytes, b".")
        common: dict[str, Any] = {"id": mid, "topic": topic, "seq": seq, "worker": worker}
        if mgroup:
            common["mgroup"] = mgroup
        self.history.append(INVOKE, "send", process=process, **common)
        try:
            receipt = producer.send(msg)
        except Exception as exc:  # retried inside the client: never definite
            self.history.append(INFO, "send", process=process, error=_error_text(exc), **common)
            return self.new_process()
        bgroup = str(receipt.message_queue).split(".")[0]
        self.history.append(
            OK, "send", process=process, bgroup=bgroup, offset=int(receipt.offset), **common
        )
        self.acked[topic].add(mid)
        return process

    # -- consuming ---------------------------------------------------------------------

    def _official_consumer(self, endpoints: str, topic: str, cg: str) -> None:
        """Receive and acknowledge with the official SimpleConsumer until told to stop.
        Its messages do not say where they are stored; the receipt handle does (the
        broker group that delivered it, queue and offset: broker/messaging/receipt.py).
        For a FIFO consumer group the broker keeps each queue's order across POP
        receives (nothing after an unacknowledged message); the messages of a batch
        are acknowledged in the order received."""
        from rocketmq.v5.client import ClientConfiguration, Credentials
        from rocketmq.v5.consumer import SimpleConsumer
        from rocketmq.v5.model import FilterExpression

        from rocketcluster.broker.messaging.receipt import InvalidReceiptHandle, decode_handle

        consumer = SimpleConsumer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3),
            cg,
            {topic: FilterExpression()},
            await_duration=2,
        )
        consumer.startup()
        process = self.new_process()
        common = {"topic": topic, "cg": cg}
        invisible_s = max(1, self.config.invisible_ms // 1000)
        try:
            while not self._stop_consuming.is_set():
                self.history.append(INVOKE, "receive", process=process, **common)
                try:
                    got = consumer.receive(32, invisible_s)
                except Exception as exc:
                    self.history.append(
                        INFO, "receive", process=process, error=_error_text(exc), **common
                    )
                    process = self.new_process()
                    time.sleep(0.3)
                    continue
                if not got:
                    self.history.append(OK, "receive", process=process, count=0, **common)
                    continue
                self.last_delivery = time.monotonic()
                places: list[list[Any]] = []
                for msg in got:
                    try:
                        where = decode_handle(msg.receipt_handle)
                    except InvalidReceiptHandle:
                        where = None
                    mid = bytes(msg.body).split(b"|", 1)[0].decode(errors="replace")
                    bgroup = where.group if where else ""
                    queue = where.queue_id if where else -1
                    offset = where.queue_offset if where else -1
                    places.append([mid, bgroup, queue, offset])
                    self.history.append(
                        OK,
                        "receive",
                        process=process,
                        id=mid,
                        mgroup=msg.message_group or "",
                        bgroup=bgroup,
                        queue=queue,
                        offset=offset,
                        attempt=msg.delivery_attempt,
                        **common,
                    )
                process = self._official_ack(consumer, process, got, places, common)
        finally:
            with contextlib.suppress(Exception):
                consumer.shutdown()

    def _official_ack(
        self,
        consumer: Any,
        process: int,
        got: list[Any],
        places: list[list[Any]],
        common: Mapping[str, object],
    ) -> int:
        """Acknowledge a batch one message at a time; the completion lists those whose
        ack succeeded. A failed ack comes back after its invisible time."""
        self.history.append(INVOKE, "ack", process=process, count=len(got), **common)
        acked: list[list[Any]] = []
        error = ""
        for msg, place in zip(got, places, strict=True):
            try:
                consumer.ack(msg)
                acked.append(place)
            except Exception as exc:
                error = error or _error_text(exc)
        failed = len(got) - len(acked)
        if not failed:
            self.history.append(OK, "ack", process=process, count=len(acked), acked=acked, **common)
            return process
        self.history.append(
            FAIL,
            "ack",
            process=process,
            count=len(acked),
            failed=failed,
            acked=acked,
            error=error,
            **common,
        )
        return process

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
        bgroup = common.get("bgroup", "")
        acked = [  # the entries come in the order of the messages
            [
                msg.body.split(b"|", 1)[0].decode(errors="replace"),
                bgroup,
                msg.system_properties.queue_id,
                msg.system_properties.queue_offset,
            ]
            for msg, entry in zip(got, entries, strict=True)
            if entry.status.code == pb.Code.OK
        ]
        failed = [e for e in entries if e.status.code != pb.Code.OK]
        if failed:
            self.history.append(
                FAIL,
                "ack",
                process=process,
                count=len(failed),
                acked=acked,
                error=failed[0].status.message[:160],
                **common,
            )
        else:
            self.history.append(OK, "ack", process=process, count=len(got), acked=acked, **common)
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
                    for topic in TOPICS
                )
            )

        asyncio.run_coroutine_threadsafe(main(), self._loop).result(timeout=timeout_s + 60)
        return time.monotonic() <= deadline
