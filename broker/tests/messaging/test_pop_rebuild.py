"""A replica rebuilding its POP consumption state (found by the seed-3 soak).

An old master that rejoins as a slave cuts the tail the group did not keep; when that
tail held POP journal records, its consumption state is rebuilt. It used to replay the
whole retained journal in one piece on the event loop: 5-33 s in which the broker sent
no heartbeat and served no replication. Now the rebuild starts from the latest
checkpoint (every state in one tagged write) and runs in slices that give the loop back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.pop import CHECKPOINT_RETRY_S, POSITION_KEY, REPLAY_SLICE
from rocketcluster.broker.messaging.pop_journal import (
    CHECKPOINT_TAG,
    JOURNAL_QUEUE,
    JOURNAL_TOPIC,
    KeyedOp,
    PopJournalWriter,
    StateKey,
    apply_op,
    decode_record,
    encode_records,
)
from rocketcluster.broker.messaging.pop_replay import PopJournalReplayer
from rocketcluster.broker.store import MessageStore, MessageToStore, PutResult, PutStatus
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.record import tags_code
from rocketcluster.broker.store.replica import truncate_to
from rocketcluster.ctl.testing import small_store_config

from .test_pop_journal import _pop, _receive, _states


def _journal(store: MessageStore) -> ConsumeQueue:
    cq = store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE)
    assert cq is not None
    return cq


async def _open(tmp_path: Path) -> MessageStore:
    return await MessageStore.open(
        small_store_config(tmp_path / "s", segment_size=1 << 20, cq_block_entries=256)
    )


async def test_a_cut_replica_rebuilds_from_the_latest_checkpoint(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    try:
        await store.put_batch(
            [MessageToStore.build("t", i % 2, b"m", msg_id=f"M{i:031d}") for i in range(300)]
        )
        master = _pop(store, checkpoint_every=40)
        master.promote()
        # One journal write per receive and per ack, as a slow trickle of official
        # clients makes them: a long journal, with a checkpoint every 40 records.
        for _ in range(120):
            [delivery] = await _receive(master, 1)
            master.ack("g", "t", delivery.handle)
            await master.recorded("ack")
            master.checkpoint_if_due()
        await master.recorded("checkpoint")
        assert master.journal.checkpoints >= 5
        # Left in flight, two of them acknowledged out of order: the states to rebuild
        # hold more than a committed offset.
        inflight = await _receive(master, 6)
        for d in (inflight[1], inflight[4]):
            master.ack("g", "t", d.handle)
        await master.recorded("acks")

        replica = _pop(store)
        replica.replay()
        await replica.replayed()
        assert _states(replica) == _states(master)

        # The tail the group does not keep, applied by the replica before the cut.
        cut = master.replayer.position.physical_offset
        master.ack("g", "t", inflight[0].handle)
        await master.recorded("ack")
        replica.replay()
        await replica.replayed()
        store.set_confirm_offset(None)
        truncate_to(store, cut)
        store.flush_service.flushed_offset = cut  # this store played master past the cut

        other = _pop(store)  # the new master: a checkpoint first, then its own acks
        other.promote()
        other.ack("g", "t", inflight[2].handle)
        await other.recorded("ack")
        journal = _journal(store).max_index
        applied = replica.replayer.applied
        replica.replay()
        await replica.replayed()
        assert replica.replayer.rebuilds == 1
        assert not replica.replayer.rebuilding
        assert _states(replica) == _states(other)
        # From the new master's checkpoint on: a record or two, of hundreds.
        assert journal > 200
        assert replica.replayer.applied - applied <= 3
    finally:
        await store.close()


def _synthetic_journal(queues: int, records: int) -> tuple[list[bytes], dict[StateKey, Any]]:
    """A journal as an older broker wrote it, with no checkpoint: each queue's base as a
    ``Z`` op in the first record, then deliveries and acks; and the states it gives."""
    states = {("g", "t", q): QueueConsumeState(0) for q in range(queues)}
    bodies = encode_records("w-0", [(k, ["Z", s.full_snapshot()]) for k, s in states.items()])
    keys = list(states)
    for i in range(1, records):
        key = keys[i % queues]
        offset = states[key].next_offset
        ops: list[KeyedOp] = [(key, ["D", offset, 1, 10**13, i, "c", 0])]
        if i % 3:
            ops.append((key, ["K", offset]))
        for k, op in ops:
            apply_op(states[k], op)
        bodies += encode_records(f"w-{i}", ops)
    return bodies, {k: s.full_snapshot() for k, s in states.items()}


async def test_a_long_rebuild_gives_the_loop_back_and_is_not_saved_half_done(
    tmp_path: Path,
) -> None:
    store = await _open(tmp_path)
    try:
        bodies, expected = _synthetic_journal(queues=4, records=3_000)
        for i in range(0, len(bodies), 500):
            await store.put_batch(
                [MessageToStore.build(JOURNAL_TOPIC, JOURNAL_QUEUE, b) for b in bodies[i : i + 500]]
            )
        store.dispatcher.dispatch_until(store.dispatch_limit)
        replica = _pop(store)
        ticks = 0

        async def tick() -> None:  # stands for heartbeats and the replication stream
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        try:
            assert replica.replay() == REPLAY_SLICE  # a slice now, the rest in a task
            assert replica.replayer.behind() and replica.replayer.rebuilding
            assert replica.persist() == 0  # half-rebuilt states are not saved
            assert store.metadata.get_value(POSITION_KEY) is None
            before = ticks
            await replica.replayed()
            # The loop ran other work between the slices (3,000 records in slices of 256).
            assert ticks - before >= len(bodies) // REPLAY_SLICE - 1
        finally:
            ticker.cancel()
        assert not replica.replayer.behind() and not replica.replayer.rebuilding
        assert replica.replayer.applied == len(bodies)
        assert _states(replica) == expected
        replica.persist()
        assert store.metadata.get_value(POSITION_KEY) is not None
    finally:
        await store.close()


async def test_the_latest_whole_checkpoint_is_found_across_records_and_cuts(
    tmp_path: Path,
) -> None:
    store = await _open(tmp_path)
    try:
        writer = PopJournalWriter(store.put_batch, writer="w", limit=400)
        keys: list[StateKey] = [("g", "t", q) for q in range(40)]
        zs: list[KeyedOp] = [
            (k, ["Z", QueueConsumeState(q).full_snapshot()])
            for k, q in zip(keys, range(40), strict=True)
        ]

        async def write_checkpoint() -> tuple[int, int]:
            first = _journal(store).max_index if store.queues.get(JOURNAL_TOPIC, 0) else 0
            writer.append(keys[0], ["D", 0, 1, 10**13, 1, "c", 0])  # pending before it
            writer.append_checkpoint(zs)
            assert (await writer.sync()).ok
            return first, _journal(store).max_index

        first_begin, first_end = await write_checkpoint()
        writer.append(keys[1], ["K", 3])
        assert (await writer.sync()).ok
        second_begin, second_end = await write_checkpoint()
        assert writer.checkpoints == 2 and writer.records_since_checkpoint == 0
        assert second_end - second_begin > 3  # one write, several records
        store.dispatcher.dispatch_until(store.dispatch_limit)
        cq = _journal(store)
        code = tags_code(CHECKPOINT_TAG)
        tagged = [i for i in range(cq.max_index) if (e := cq.get(i)) and e.tags_code == code]
        assert tagged == [first_end - 1, second_end - 1]  # only each write's last record

        replayer = PopJournalReplayer(store, lambda ops, rebuilding: None, lambda: None, None)
        assert replayer.latest_checkpoint(cq) == second_begin
        entry = cq.get(second_begin)
        assert entry is not None
        msg = store.read_message(entry.physical_offset, entry.size, count_cache=False)
        assert decode_record(msg.body)[0].endswith(".0")

        # Cut inside the second checkpoint's write: its tagged last record is gone, so
        # the first one is the latest whole checkpoint.
        middle = cq.get(second_begin + 2)
        assert middle is not None
        store.set_confirm_offset(None)
        truncate_to(store, middle.physical_offset)
        assert replayer.latest_checkpoint(cq) == first_begin
    finally:
        await store.close()


async def test_the_master_writes_a_checkpoint_when_due(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    try:
        await store.put_batch(
            [MessageToStore.build("t", 0, b"m", msg_id=f"M{i:031d}") for i in range(40)]
        )
        master = _pop(store, checkpoint_every=10)
        assert not master.checkpoint_if_due()  # not master: never
        master.promote()  # nothing consumed here yet: no journal, no checkpoint
        await master.recorded("checkpoint")
        assert master.journal.checkpoints == 0
        assert store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE) is None
        [d] = await _receive(master, 1)
        master.ack("g", "t", d.handle)
        await master.recorded("ack")
        master.demote()
        master.promote()  # taking over with a journal (and a state) writes one
        await master.recorded("checkpoint")
        assert master.journal.checkpoints == 1
        for _ in range(6):
            [d] = await _receive(master, 1)
            master.ack("g", "t", d.handle)
            await master.recorded("ack")
        assert master.journal.records_since_checkpoint == 12
        assert master.checkpoint_if_due()
        assert not master.checkpoint_if_due()  # one is pending already
        await master.recorded("checkpoint")
        assert master.journal.checkpoints == 2
        assert master.journal.records_since_checkpoint == 0
        # A checkpoint that could not be written is tried again, but not at once.
        master.journal.records_since_checkpoint = 10
        master.journal.checkpoint_failed_at = time.monotonic()
        assert not master.checkpoint_if_due()
        master.journal.checkpoint_failed_at = time.monotonic() - CHECKPOINT_RETRY_S
        assert master.checkpoint_if_due()
        await master.recorded("checkpoint")
        assert master.journal.checkpoints == 3 and master.journal.checkpoint_failed_at is None
    finally:
        await store.close()


async def test_a_checkpoint_the_store_refuses_is_remembered_as_failed() -> None:
    async def refuse(records: Sequence[MessageToStore]) -> PutResult:
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="no in-sync replicas")

    writer = PopJournalWriter(refuse, writer="w")
    writer.append_checkpoint([(("g", "t", 0), ["Z", QueueConsumeState(0).full_snapshot()])])
    assert writer.checkpoint_pending
    result = await writer.sync()
    assert not result.ok and not writer.checkpoint_pending
    assert writer.checkpoints == 0 and writer.checkpoint_failed_at is not None
