"""Files that fail their checks at start are moved aside and reported, never dropped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.consumequeue import DATABASE_NAME

from .conftest import message, small_config


async def write_some(root: Path, count: int = 80) -> list[str]:
    store = await MessageStore.open(small_config(root))
    ids = []
    for i in range(count):
        ids.append(message(i).msg_id)
        assert (await store.put(message(i, size=300))).ok
    await store.close()
    return ids


def reasons(store: MessageStore) -> list[str]:
    return [q.reason for q in store.recovery.quarantined]


async def test_stray_file_in_the_commit_log_is_quarantined(store_dir: Path) -> None:
    await write_some(store_dir)
    (store_dir / "commitlog" / "notes.txt").write_text("hello")
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert reasons(store) == ["not a commit log segment name"]
        moved = Path(store.recovery.quarantined[0].moved_to)
        assert moved.read_bytes() == b"hello"  # noqa: ASYNC240 (a test reading a file)
        note = json.loads(moved.with_name(moved.name + ".reason.json").read_bytes())
        assert note["reason"] == "not a commit log segment name"
        assert sum(store.queue_offsets("orders", q)[1] for q in range(3)) == 80
    finally:
        await store.close()


async def test_segment_after_a_gap_is_quarantined_not_merged(store_dir: Path) -> None:
    await write_some(store_dir)
    segments = sorted((store_dir / "commitlog").iterdir())
    assert len(segments) >= 4
    segments[1].unlink()  # a hole in the middle of the log
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert any(r.startswith("gap") for r in reasons(store))
        assert store.commitlog.write_offset <= 8192
        for seg in segments[2:]:
            assert not seg.exists()
            assert any(q.original == str(seg) for q in store.recovery.quarantined)
        # The rest of the store is consistent with what was kept.
        kept = list(store.commitlog.iter_records(0))
        total = sum(store.queue_offsets("orders", q)[1] for q in range(3))
        assert total == len(kept)
    finally:
        await store.close()


async def test_corrupt_durable_segment_is_cut_and_kept(store_dir: Path) -> None:
    await write_some(store_dir)
    segments = sorted((store_dir / "commitlog").iterdir())
    with segments[2].open("r+b") as f:  # damage the first record of the third segment
        f.seek(30)
        f.write(b"\xff\xff\xff\xff")
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert store.commitlog.write_offset == 2 * 8192
        assert any("fsynced data" in w for w in store.recovery.warnings)
        originals = {q.original for q in store.recovery.quarantined}
        assert str(segments[3]) in originals
        assert store.recovery.bytes_discarded > 0  # the damaged segment's bytes kept aside
    finally:
        await store.close()


async def test_unreadable_checkpoint_means_a_full_scan(store_dir: Path) -> None:
    await write_some(store_dir)
    (store_dir / "checkpoint").write_text("{not json")
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert any("checkpoint" in r for r in reasons(store))
        assert sum(store.queue_offsets("orders", q)[1] for q in range(3)) == 80
    finally:
        await store.close()


async def test_lost_consume_queues_are_rebuilt_from_the_commit_log(store_dir: Path) -> None:
    import shutil

    ids = await write_some(store_dir)
    shutil.rmtree(store_dir / "consumequeue")
    shutil.rmtree(store_dir / "index")
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert store.recovery.index_rebuilt
        assert sum(store.queue_offsets("orders", q)[1] for q in range(3)) == 80
        assert [m.msg_id for m in store.lookup_by_id(ids[5])] == [ids[5]]
    finally:
        await store.close()


async def test_inconsistent_consume_queue_is_quarantined_and_rebuilt(store_dir: Path) -> None:
    await write_some(store_dir)
    db = sqlite3.connect(store_dir / "consumequeue" / DATABASE_NAME)
    (qid,) = db.execute("SELECT qid FROM queues WHERE topic = 'orders' AND queue_id = 1").fetchone()
    blocks = db.execute(
        "SELECT block, first, units FROM blocks WHERE qid = ? ORDER BY block", (qid,)
    ).fetchall()
    data = bytearray(b"".join(units for _, _, units in blocks))
    entry = [int.from_bytes(data[k * 20 : k * 20 + 8], "big") for k in range(16)]
    # Recovery is told derived data is good up to entry 8; entries 3..7 are damaged so
    # that they point past it: re-dispatch finds a gap, and must rebuild every queue.
    boundary = entry[8]
    for k in range(3, 8):
        data[k * 20 : k * 20 + 8] = (boundary + 1).to_bytes(8, "big")
    at = 0
    with db:
        for block, _, units in blocks:  # the same blocks, damaged
            db.execute(
                "UPDATE blocks SET units = ? WHERE qid = ? AND block = ?",
                (bytes(data[at : at + len(units)]), qid, block),
            )
            at += len(units)
    db.close()
    checkpoint = json.loads((store_dir / "checkpoint").read_text())
    checkpoint["logics_flushed"] = checkpoint["commitlog_flushed"] = boundary
    (store_dir / "checkpoint").write_text(json.dumps(checkpoint))
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert any("disagrees with the commit log" in r for r in reasons(store))
        assert sum(store.queue_offsets("orders", q)[1] for q in range(3)) == 80
        got = store.get_messages("orders", 1, 0, 100).messages
        assert [m.queue_offset for m in got] == list(range(len(got)))
        assert [m.physical_offset for m in got[:8]] == entry[:8]
    finally:
        await store.close()
