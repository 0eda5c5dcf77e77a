"""The POP journal: its codec, replaying recorded transitions, and the journal over a
real store (group commit, replay by another PopService, a cut tail rebuilt)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging.consume_state import Op, QueueConsumeState
from rocketcluster.broker.messaging.filters import FilterCache
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop import CHECKPOINT_EVERY_RECORDS, PopService
from rocketcluster.broker.messaging.pop_journal import (
    JOURNAL_TOPIC,
    JournalFormatError,
    apply_op,
    decode_record,
    encode_records,
)
from rocketcluster.broker.messaging.pop_metrics import register_pop_metrics
from rocketcluster.broker.messaging.revive import PopReviveService, revive_due
from rocketcluster.broker.metrics import BrokerMetrics
from rocketcluster.broker.store import MessageStore, MessageToStore, StoredMessage
from rocketcluster.broker.store.replica import truncate_to
from rocketcluster.ctl.testing import small_store_config


def test_codec_round_trip_and_split() -> None:
    ops: list[tuple[tuple[str, str, int], Op]] = [
        (("g", "t", i % 3), ["D", i, 1, 10_000 + i, 77 + i, "client", 0]) for i in range(300)
    ]
    ops.append((("g", "t", 0), ["Z", QueueConsumeState(5).full_snapshot()]))
    [body] = encode_records("w-1", ops)
    record_id, decoded = decode_record(body)
    assert record_id == "w-1.0" and decoded == ops
    parts = encode_records("w-2", ops, limit=1000)
    assert len(parts) > 3
    assert [op for p in parts for op in decode_record(p)[1]] == ops
    with pytest.raises(JournalFormatError):
        decode_record(b'{"id": "x", "k": [], "o": [[0, "K", 1]]}')
    with pytest.raises(JournalFormatError):
        apply_op(QueueConsumeState(0), ["?"])


@pytest.mark.parametrize("seed", range(5))
def test_replaying_the_recorded_ops_gives_the_same_state(seed: int) -> None:
    """Every transition of a master's state, applied in order to a copy of its
    starting point, yields the same state: deliveries with their deadlines, nonces
    and attempts, waiting messages, acks out of order."""
    rng = random.Random(seed)
    master = QueueConsumeState(10)
    replica = QueueConsumeState.from_full(master.full_snapshot())
    ops: list[Op] = []
    master.sink = ops.append
    now = 0
    for _ in range(400):
        now += rng.randint(0, 50)
        choice = rng.random()
        due = master.redeliverable(now)
        if choice < 0.3:
            master.deliver(master.next_offset, 1, now + 100, rng.randint(1, 1 << 40), "c", False)
        elif choice < 0.4 and due:
            offset, attempts = due[0]
            master.deliver(offset, attempts + 1, now + 100, rng.randint(1, 1 << 40), "c", True)
        elif choice < 0.6 and master.next_offset > master.committed:
            master.mark_done(rng.randrange(master.committed, master.next_offset))
        elif choice < 0.65:
            master.skip_new(master.next_offset)
        elif choice < 0.7 and master.inflight:
            offset = rng.choice(list(master.inflight))
            master.change_invisible(offset, now + 500, rng.randint(1, 99))
        elif choice < 0.75 and master.inflight:
            master.make_visible(rng.choice(list(master.inflight)))
        elif choice < 0.8:
            master.renew(now, 200, alive={"c"} if rng.random() < 0.7 else set())
        elif choice < 0.81:
            master.advance_to(master.committed + 2)
        elif choice < 0.815:
            master.reset_to(master.next_offset)
    for op in ops:
        apply_op(replica, op)
    assert replica.full_snapshot() == master.full_snapshot()
    assert len(ops) > 200


# -- over a real store ----------------------------------------------------------------

TOPIC = TopicSpec(name="t", queues=2)
GROUP = ConsumerGroupSpec(name="g", maxDeliveryAttempts=2)


def _dead_letter(group: str, msg: StoredMessage, attempts: int) -> MessageToStore:
    return MessageToStore.build(f"%DLQ%{group}", 0, msg.body, msg_id=msg.msg_id)


def _pop(store: MessageStore, checkpoint_every: int = CHECKPOINT_EVERY_RECORDS) -> PopService:
    return PopService(
        store,
        ArrivalNotifier(),
        MessagingTuning(),
        _dead_letter,
        group_spec=lambda name: GROUP if name == "g" else None,
        checkpoint_every=checkpoint_every,
    )


async def _receive(pop: PopService, count: int, invisible_ms: int = 60_000) -> list[Any]:
    return await pop.receive(
        GROUP,
        TOPIC,
        -1,
        FilterCache().get("TAG", "*"),
        count,
        invisible_ms,
        auto_renew=False,
        client_id="c",
        wait_seconds=0,
    )


def _exported(pop: PopService) -> dict[str, float]:
    """The POP counters a broker running ``pop`` exports, as Prometheus parses them."""
    metrics = BrokerMetrics("c", "n")
    register_pop_metrics(metrics, pop, PopReviveService(pop, lambda: False))
    return {
        s.name: s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name.startswith("rocketmq_pop_")
    }


def _states(pop: PopService) -> dict[Any, Any]:
    return {k: s.full_snapshot() for k, s in pop.states().items()}


async def test_journal_replayed_by_another_broker_and_a_cut_tail_rebuilt(tmp_path: Path) -> None:
    store = await MessageStore.open(small_store_config(tmp_path / "s", segment_size=1 << 20))
    try:
        await store.put_batch(
            [MessageToStore.build("t", i % 2, b"m", msg_id=f"M{i:031d}") for i in range(40)]
        )
        master = _pop(store)
        master.promote()
        got = await _receive(master, 30)
        assert len(got) == 30
        # Concurrent acks (one per request, as the official clients send them) share
        # journal writes instead of one put and one replication wait each.
        writes = master.journal.writes

        async def ack(handle: str) -> None:
            master.ack("g", "t", handle)
            await master.recorded("ack")

        await asyncio.gather(*(ack(d.handle) for d in got[:20]))
        assert master.journal.writes - writes <= 2
        master.change_invisible("g", "t", got[25].handle, 1)  # expires at once
        await master.recorded("change")
        await asyncio.sleep(0.05)
        assert await revive_due(master) == 0  # attempt 1 of 2: redelivered, not moved
        again = await _receive(master, 1, invisible_ms=1)
        assert [d.attempt for d in again] == [2]  # the last attempt
        await asyncio.sleep(0.05)
        assert await revive_due(master) == 1  # moved to the DLQ with nobody receiving
        dlq = store.queues.get("%DLQ%g", 0)
        assert dlq is not None and dlq.max_index == 1

        replica = _pop(store)  # another broker's view: replays what the master wrote
        assert replica.replay() > 0
        assert _states(replica) == _states(master)

        # A tail the group did not keep: cut it, write something else in its place.
        cut = master.replayer.position.physical_offset
        master.ack("g", "t", got[21].handle)
        await master.recorded("ack")
        replica.replay()
        assert replica.states()[("g", "t", 1)].committed == master.states()[("g", "t", 1)].committed
        store.set_confirm_offset(None)
        truncate_to(store, cut)
        # (This store plays master and slave in turn: its flush service, unlike a
        # slave's, flushed past the cut already and must count from the cut again.)
        store.flush_service.flushed_offset = cut
        other = _pop(store)
        other.replay()
        other.promote()
        other.ack("g", "t", got[22].handle)
        await other.recorded("ack")
        assert replica.replay() > 0
        assert replica.replayer.rebuilds == 1
        assert _states(replica) == _states(other)
        # What Prometheus reads of each: the master's puts and changes, the
        # replica's applied records and its one rebuild.
        seen = {name: _exported(pop) for name, pop in (("master", master), ("replica", replica))}
        assert seen["master"]["rocketmq_pop_journal_writes_total"] == master.journal.writes > 0
        assert (
            seen["master"]["rocketmq_pop_journal_ops_total"]
            == master.journal.ops_written
            > master.journal.writes
        )
        assert seen["replica"]["rocketmq_pop_journal_rebuilds_total"] == 1
        assert seen["replica"]["rocketmq_pop_journal_applied_total"] == replica.replayer.applied
        assert seen["replica"]["rocketmq_pop_journal_writes_total"] == 0  # never master
    finally:
        await store.close()


def test_journal_topic_is_a_system_topic() -> None:
    assert JOURNAL_TOPIC.startswith("RMQ_SYS_")
