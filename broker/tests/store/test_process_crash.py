"""kill -9 of a writer process in the middle of its batches, then recovery."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.files import offset_name
from rocketcluster.ctl.store_writer import QUEUES, spread_topic, write_then_kill, writer_config


def lose_unsynced_tail(root: Path, synced: int, segment_size: int, rng: random.Random) -> None:
    """What a power cut adds to kill -9: bytes after the last acked fsync may vanish."""
    directory = root / "commitlog"
    ends = sorted(int(p.name) + segment_size for p in directory.iterdir())
    end = ends[-1] if ends else 0
    if end <= synced:
        return
    at = rng.randrange(synced, end)
    base = at - at % segment_size
    os.truncate(directory / offset_name(base), at - base)
    for later in directory.iterdir():
        if int(later.name) > base:
            later.unlink()


@pytest.mark.parametrize("round_", range(4))
def test_kill_dash_nine_mid_batch_loses_no_acknowledged_record(tmp_path: Path, round_: int) -> None:
    rng = random.Random(round_)
    root = tmp_path / "store"
    acked: dict[str, int] = {}
    # Several crashes on the same directory, each followed by more writes.
    for run in range(3):
        writers, batch = rng.choice([1, 4, 16]), rng.choice([1, 3, 8])
        acked.update(write_then_kill(root, rng.randint(50, 400), writers, batch, f"r{run}")[0])
    if round_ % 2:
        lose_unsynced_tail(root, max(acked.values()), 64 * 1024, rng)

    async def check() -> None:
        cfg = writer_config(root)
        store = await MessageStore.open(cfg)
        try:
            ids = [m.msg_id for m in store.commitlog.iter_records(store.commitlog.min_offset)]
            assert len(ids) == len(set(ids)), "a record was stored twice"
            missing = set(acked) - set(ids)
            assert not missing, (
                f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
            )
            for qid in range(4):
                got = store.get_messages("crash", qid, 0, 100_000, max_scan=100_000)
                assert [m.queue_offset for m in got.messages] == list(range(len(got.messages)))
            sample = rng.sample(sorted(acked), min(20, len(acked)))
            for msg_id in sample:
                assert [m.msg_id for m in store.lookup_by_id(msg_id)] == [msg_id]
        finally:
            await store.close()

    asyncio.run(check())


def test_a_store_of_20000_queues_is_killed_and_every_acknowledged_message_is_read(
    tmp_path: Path,
) -> None:
    """One message in each of 20,000 queues (5,000 topics x 4), kill -9, reopen: every
    acknowledged message at its queue offset, from a consume-queue store of a few files
    (a file per queue was 40,000 files and, at the default size, 120 GB)."""
    root = tmp_path / "store"
    topics = 5000
    # Killed a little after the 20,000th ack: the four writers run about evenly, so
    # every queue has had its first message acknowledged by then.
    acked, _ = write_then_kill(root, topics * QUEUES + 4096, 4, 32, "many", topics=topics)
    ids_by_queue: dict[tuple[str, int], list[str]] = {}
    for n in range(topics * QUEUES + 8192):
        # writer w's k-th message is the (k * writers + w)-th overall
        w, k = n % 4, n // 4
        msg_id = f"many-w{w}-n{k}"
        if msg_id in acked:
            ids_by_queue.setdefault((spread_topic(n, topics), n % QUEUES), []).append(msg_id)
    assert len(ids_by_queue) == topics * QUEUES

    async def check() -> None:
        store = await MessageStore.open(writer_config(root))
        try:
            assert len(store.queues) >= topics * QUEUES
            for (topic, queue_id), ids in ids_by_queue.items():
                got = store.get_messages(topic, queue_id, 0, 10).messages
                assert [m.msg_id for m in got[: len(ids)]] == ids, (topic, queue_id)
                assert [m.queue_offset for m in got] == list(range(len(got)))
        finally:
            await store.close()
        files = list((root / "consumequeue").iterdir())
        assert len(files) <= 3, files  # the database, its log and shared memory

    asyncio.run(check())
