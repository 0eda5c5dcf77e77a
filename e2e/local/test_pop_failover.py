"""Consumption state across failovers, and dead letters nobody waits for.

One replicated group (three replicas, sync on two) for the module. A POP consumer
works through a stream of messages while the master is killed (SIGKILL) 20 times in
a row: every delivery is recorded, and no acknowledged message may be delivered again
(by a receive that started after the ack was answered), no retry count may go back,
nothing may be lost. Then a consumer that never acknowledges and goes away: its
message reaches ``%DLQ%<group>`` within its invisible time plus a few seconds, and the
official client reads it from there.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, quiet_official_client, wait_for

from .conftest import Cluster

TOPIC = "work"
GROUP = "workers"
LEAVERS = "leavers"
KILLS = 20
INVISIBLE_MS = 1500
SLOW_ATTEMPTS = 3  # every 4th message is acked only at this attempt


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "pop"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": 1,
                    "replicas": 3,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                },
                "topics": [{"name": TOPIC, "queues": 4}, {"name": "left", "queues": 1}],
                "consumerGroups": [
                    {"name": GROUP},
                    {"name": LEAVERS, "maxDeliveryAttempts": 1},
                    {"name": "dlq-readers"},
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    quiet_official_client()
    runtime = LocalRuntime(tmp_path_factory.mktemp("pop"))
    overrides = {
        "segment_size": 16 << 20,
        **DISK_GUARDS_OFF,
        "messaging": {"minInvisibleMs": 100, "consumeStatePersistMs": 200},
    }
    state = runtime.up(_cluster(), overrides=overrides)
    try:
        handle = Cluster(runtime, state)
        handle.master()
        handle.wait_in_sync(3)
        yield handle
    finally:
        runtime.down()


@dataclass
class History:
    """What the consumer saw: per message, its deliveries (receive started at, attempt)
    and when its ack was answered OK."""

    deliveries: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    acked: dict[str, float] = field(default_factory=dict)
    produced: set[str] = field(default_factory=set)
    errors: int = 0
    ack_refusals: list[str] = field(default_factory=list)


def _slow(message_id: str) -> bool:
    return zlib.crc32(message_id.encode()) % 4 == 0


async def _produce(endpoint: str, history: History, stop: threading.Event) -> None:
    async with LeanClient(endpoint, timeout=3) as client:
        i = 0
        while not stop.is_set():
            batch = [OutgoingMessage(f"m{i + k}".encode()) for k in range(10)]
            i += 10
            try:
                entries = await client.send(TOPIC, batch)
                history.produced.update(e.message_id for e in entries if e.status.code == 20000)
            except Exception:
                history.errors += 1
            await asyncio.sleep(0.1)


async def _consume(endpoint: str, history: History, stop: threading.Event) -> None:
    async with LeanClient(endpoint, timeout=3) as client:
        while not stop.is_set():
            started = time.time()
            try:
                batch = await client.receive(
                    GROUP, TOPIC, batch=16, invisible_ms=INVISIBLE_MS, poll_ms=500
                )
            except Exception:
                history.errors += 1
                await asyncio.sleep(0.2)
                continue
            to_ack = []
            for msg in batch:
                sp = msg.system_properties
                history.deliveries.setdefault(sp.message_id, []).append(
                    (started, sp.delivery_attempt)
                )
                if not _slow(sp.message_id) or sp.delivery_attempt >= SLOW_ATTEMPTS:
                    to_ack.append(msg)
            # A failed ack is retried with the same receipt handles (a failover in
            # between: the new master accepts the old master's handles).
            for _ in range(20):
                if not to_ack:
                    break
                try:
                    entries = await client.ack(GROUP, TOPIC, to_ack)
                except Exception:
                    history.errors += 1
                    await asyncio.sleep(0.3)
                    continue
                answered = time.time()
                ok = {e.message_id for e in entries if e.status.code == 20000}
                for mid in ok:
                    history.acked.setdefault(mid, answered)
                failed = [e for e in entries if e.status.code != 20000]
                if failed:
                    history.ack_refusals.append(failed[0].status.message)
                    await asyncio.sleep(0.3)
                to_ack = [m for m in to_ack if m.system_properties.message_id not in ok]


def _run(coro_factory: object, *args: object) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: asyncio.run(coro_factory(*args)),  # type: ignore[operator]
        daemon=True,
    )
    thread.start()
    return thread


@pytest.mark.timeout(600)  # about 3 minutes on a busy 2-core machine
def test_master_kills_under_a_pop_consumer_keep_acks_and_retry_counts(cluster: Cluster) -> None:
    history = History()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    threads = [
        _run(_produce, cluster.endpoints, history, stop_producing),
        _run(_consume, cluster.endpoints, history, stop_consuming),
    ]
    kills = []
    try:
        for _ in range(KILLS):
            time.sleep(0.7)
            victim = cluster.master()
            cluster.runtime.kill(victim["name"])
            new = cluster.master(exclude={victim["name"]})
            kills.append((victim["name"], new["name"]))
            cluster.runtime.restart(victim["name"])  # back as a slave
            cluster.wait_in_sync(3)
        stop_producing.set()
        wait_for(
            lambda: history.produced and history.produced <= set(history.acked),
            timeout=60,
            what="every produced message acknowledged (nothing lost)",
        )
    finally:
        stop_producing.set()
        stop_consuming.set()
        for t in threads:
            t.join(timeout=30)
    assert len({v for v, _ in kills}) >= 2, kills  # the role moved around the group
    assert len(history.produced) > 500
    again = {
        mid: [d for d in history.deliveries[mid] if d[0] > acked]
        for mid, acked in history.acked.items()
    }
    again = {mid: d for mid, d in again.items() if d}
    assert not again, (
        f"{len(again)} acknowledged messages delivered again: {list(again.items())[:3]}"
    )
    backwards = {
        mid: ds
        for mid, ds in history.deliveries.items()
        if any(b[1] <= a[1] for a, b in itertools.pairwise(ds))
    }
    assert not backwards, f"retry counts went back: {list(backwards.items())[:3]}"
    # Every 4th message was left to expire twice: the failovers in between kept its
    # count (a reset would show above as an attempt going back). A delivery whose
    # answer a kill cut off counts too, so attempts may skip a number, never repeat.
    slow = [mid for mid in history.acked if _slow(mid)]
    assert len(slow) > 100
    assert all(history.deliveries[mid][-1][1] >= SLOW_ATTEMPTS for mid in slow)


def test_a_message_whose_consumers_left_reaches_its_dlq(cluster: Cluster) -> None:
    """Tried as a new user would: a consumer never acks and goes away — one says
    goodbye (the official client's NotifyClientTermination), one just vanishes (its
    delivery expires) — and nobody of the group receives again. The revive service
    moves both messages to the group's DLQ all the same."""
    config = ClientConfiguration(cluster.endpoints, Credentials(), request_timeout=10)
    producer = Producer(config, ("left",))
    producer.startup()
    try:
        sent = []
        for body in (b"goodbye", b"vanished"):
            msg = Message()
            msg.topic, msg.body = "left", body
            sent.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()

    async def vanish() -> list[str]:  # receives one, never acks, no goodbye
        async with LeanClient(cluster.endpoints) as client:
            got = await client.receive(LEAVERS, "left", batch=1, invisible_ms=3000, poll_ms=5000)
            return [m.system_properties.message_id for m in got]

    leaver = SimpleConsumer(config, LEAVERS, {"left": FilterExpression()}, await_duration=5)
    leaver.startup()
    try:
        got = wait_for(lambda: leaver.receive(1, 3), timeout=30, what="a message")
        assert got[0].delivery_attempt == 1  # maxDeliveryAttempts 1: the last one
        vanished = asyncio.run(vanish())
        received_at = time.monotonic()
    finally:
        leaver.shutdown()  # never acked
    assert sorted([got[0].message_id, *vanished]) == sorted(sent)

    reader: SimpleConsumer | None = None
    seen: dict[str, Message] = {}

    def read_dlq() -> bool:
        nonlocal reader
        if reader is None:
            reader = SimpleConsumer(
                config, "dlq-readers", {f"%DLQ%{LEAVERS}": FilterExpression()}, await_duration=2
            )
            reader.startup()
        try:  # the client asks for the route again until the DLQ topic exists
            batch = reader.receive(16, 10)
        except Exception:
            return False
        for m in batch:
            reader.ack(m)
            seen[m.message_id] = m
        return len(seen) == 2

    try:
        wait_for(read_dlq, timeout=30, interval=0.5, what=f"{sent} in %DLQ%{LEAVERS}")
        took = time.monotonic() - received_at
    finally:
        if reader is not None:
            reader.shutdown()
    assert sorted(seen) == sorted(sent)
    assert sorted(m.body for m in seen.values()) == [b"goodbye", b"vanished"]
    assert took < 3 + 8, took  # the invisible time (3 s) plus a few seconds
