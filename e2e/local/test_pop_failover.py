"""Consumption state across failovers, and dead letters nobody waits for.

One replicated group (three replicas, sync on two) for the module. A POP consumer
works through a stream of messages while the master is killed (SIGKILL) 20 times in
a row: every delivery is recorded, and no acknowledged message may be delivered again
(by a receive that started after the ack was answered), no retry count may go back,
nothing may be lost. Each victim is restarted without waiting for it: the next kill
waits only until the new master serves — the consumer's acks answered under it, its
SyncStateSet two members again (so every kill leaves an in-sync survivor holding
every acknowledged write and consumption change) — while the victim starts and
catches up in the background. Then a consumer that never acknowledges and goes away: its
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
from functools import partial
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import wait_for

from .conftest import Cluster, running

pytestmark = pytest.mark.slow

TOPIC = "work"
GROUP = "workers"
LEAVERS = "leavers"
KILLS = 20
INVISIBLE_MS = 1500
SLOW_ATTEMPTS = 3  # every 4th message is acked only at this attempt
ACKS_PER_MASTER = 20  # acks answered under each master before it is killed
BATCHED = "batched"
BATCHERS = "batchers"


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
                "topics": [
                    {"name": TOPIC, "queues": 4},
                    {"name": "left", "queues": 1},
                    {"name": BATCHED, "queues": 2},
                ],
                "consumerGroups": [
                    {"name": GROUP},
                    {"name": LEAVERS, "maxDeliveryAttempts": 1},
                    {"name": "dlq-readers"},
                    {"name": BATCHERS},
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    overrides = {
        "messaging": {"minInvisibleMs": 100, "consumeStatePersistMs": 200},
        # A killed master is found dead after 2 s instead of 3 (20 kills: 20 s less).
        "ha": {"controllerHeartbeatTimeoutMs": 2000},
    }
    with running(tmp_path_factory.mktemp("pop"), _cluster(), overrides) as handle:
        yield handle


@dataclass
class History:
    """What the consumer saw: per message, its deliveries (receive started at, attempt)
    and when its ack was answered OK."""

    deliveries: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    acked: dict[str, float] = field(default_factory=dict)
    produced: set[str] = field(default_factory=set)
    acks_answered: int = 0  # acks answered OK, whichever broker answered
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
                history.acks_answered += len(ok)
                failed = [e for e in entries if e.status.code != 20000]
                if failed:
                    history.ack_refusals.append(failed[0].status.message)
                    await asyncio.sleep(0.3)
                to_ack = [m for m in to_ack if m.system_properties.message_id not in ok]


def _pop_metrics(cluster: Cluster) -> dict[str, float]:
    """The POP journal counters from every broker's /metrics, summed per name."""
    totals: dict[str, float] = {}
    for proc in cluster.brokers():
        text = httpx.get(f"http://{proc['addresses']['admin']}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("rocketmq_pop_") and s.name.endswith("_total"):
                    totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


def _run(coro_factory: object, *args: object) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: asyncio.run(coro_factory(*args)),  # type: ignore[operator]
        daemon=True,
    )
    thread.start()
    return thread


def _acks_past(history: History, count: int) -> bool:
    return history.acks_answered >= count


def _serves_again(cluster: Cluster, epoch: int) -> dict[str, Any] | None:
    """The group's view once a master newer than ``epoch`` holds a SyncStateSet of two
    or more (the survivor caught up with it): the next kill then leaves a replica
    holding every acknowledged write."""
    view = cluster.group_view()
    if view and view["masterEpoch"] > epoch and len(view["syncStateSet"]) >= 2:
        return view
    return None


@pytest.mark.timeout(600)  # about 1 minute idle; several on a busy 2-core machine
def test_master_kills_under_a_pop_consumer_keep_acks_and_retry_counts(cluster: Cluster) -> None:
    history = History()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    threads = [
        _run(_produce, cluster.endpoints, history, stop_producing),
        _run(_consume, cluster.endpoints, history, stop_consuming),
    ]
    kills = []
    try:
        epoch = cluster.wait_in_sync(3)["masterEpoch"]
        for _ in range(KILLS):
            # Each master serves the consumer before it dies: acks answered under it.
            answered = history.acks_answered
            wait_for(
                partial(_acks_past, history, answered + ACKS_PER_MASTER),
                timeout=60,
                interval=0.05,
                what=f"{ACKS_PER_MASTER} acks answered under the master",
            )
            victim = cluster.master()
            cluster.runtime.kill(victim["name"])
            new = cluster.master(exclude={victim["name"]})
            kills.append((victim["name"], new["name"]))
            cluster.runtime.restart(victim["name"], wait=False)  # back as a slave, later
            epoch = wait_for(
                partial(_serves_again, cluster, epoch),
                timeout=120,
                interval=0.05,
                what="a new master with a SyncStateSet of two",
            )["masterEpoch"]
        stop_producing.set()
        wait_for(
            lambda: history.produced and history.produced <= set(history.acked),
            timeout=60,
            what="every produced message acknowledged (nothing lost)",
        )
        cluster.wait_in_sync(3)  # every victim back (none crashed on restart)
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
    before = _pop_metrics(cluster)
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
            got = await client.receive(LEAVERS, "left", batch=1, invisible_ms=1000, poll_ms=5000)
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
    assert took < 1 + 8, took  # the invisible time (1 s) plus a few seconds

    # The journal metrics moved with it (summed over the replicas: counted by whoever
    # was master): the master wrote the deliveries, the goodbye and the dead-lettering
    # to the journal (batched: no more puts than changes), its revive service moved
    # both messages, the slaves applied the records.
    def moved() -> dict[str, float]:
        after = _pop_metrics(cluster)
        return {name: after[name] - before.get(name, 0.0) for name in after}

    delta = moved()
    assert delta["rocketmq_pop_revive_dlq_messages_total"] == 2, delta
    assert delta["rocketmq_pop_journal_ops_total"] >= 4, delta
    assert (
        1 <= delta["rocketmq_pop_journal_writes_total"] <= delta["rocketmq_pop_journal_ops_total"]
    ), delta
    wait_for(
        lambda: moved()["rocketmq_pop_journal_applied_total"] > 0,
        timeout=30,
        what="the slaves applying the master's journal records",
    )


def test_batched_acks_and_deliveries_survive_a_master_kill(cluster: Cluster) -> None:
    """LeanClient's ReceiveBatch and AckBatch (ConsumeService) are journalled and
    replicated before they are answered, as ReceiveMessage and AckMessage are: after
    the master is SIGKILLed, no acknowledged message comes back, and the unacknowledged
    ones do, with their next attempt (the new master knew they were delivered)."""
    cluster.wait_in_sync(3)

    async def before_kill() -> tuple[set[str], set[str]]:
        async with LeanClient(cluster.endpoints, timeout=5) as client:
            entries = await client.send(
                BATCHED, [OutgoingMessage(f"batched-{i}".encode()) for i in range(40)]
            )
            ids = {e.message_id for e in entries if e.status.code == 20000}
            got: list[Any] = []
            deadline = time.monotonic() + 60
            while len(got) < len(ids) and time.monotonic() < deadline:
                got += await client.receive(
                    BATCHERS, BATCHED, batch=64, invisible_ms=3000, poll_ms=500
                )
            assert client.uses_consume_service
            acked = got[:25]
            answers = await client.ack(BATCHERS, BATCHED, acked)
            assert [a.status.code for a in answers] == [20000] * len(acked)
            return ids, {m.message_id for m in acked}

    ids, acked = asyncio.run(before_kill())
    assert len(ids) == 40
    victim = cluster.master()
    cluster.runtime.kill(victim["name"])
    cluster.master(exclude={victim["name"]})
    cluster.runtime.restart(victim["name"], wait=False)

    async def after_kill() -> list[Any]:
        seen: list[Any] = []
        async with LeanClient(cluster.endpoints, timeout=5) as client:
            deadline = time.monotonic() + 90
            quiet_until = None  # after the last expected one: a while longer for strays
            while time.monotonic() < deadline:
                if quiet_until is not None and time.monotonic() > quiet_until:
                    break
                try:
                    got = await client.receive(BATCHERS, BATCHED, batch=64, poll_ms=500)
                    if got:
                        await client.ack(BATCHERS, BATCHED, got)
                except Exception:
                    await asyncio.sleep(0.3)  # the failover itself
                    continue
                seen += got
                if quiet_until is None and {m.message_id for m in seen} >= ids - acked:
                    quiet_until = time.monotonic() + 4
        return seen

    seen = asyncio.run(after_kill())
    assert sorted(m.message_id for m in seen) == sorted(ids - acked)
    assert all(m.delivery_attempt >= 2 for m in seen), [m.delivery_attempt for m in seen]
    cluster.wait_in_sync(3)
