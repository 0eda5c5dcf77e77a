"""The consume-queue database: entries in memory until a flush, a prefix of every queue
in the database after one, and a queue that costs a row, not a file."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from rocketcluster.broker.store.consumequeue import DATABASE_NAME, ConsumeQueue, ConsumeQueueTable
from rocketcluster.broker.store.errors import StoreError

BLOCK = 8


def table(tmp_path: Path) -> ConsumeQueueTable:
    t = ConsumeQueueTable(tmp_path / "cq", BLOCK)
    t.load()
    return t


def reopen(t: ConsumeQueueTable, tmp_path: Path) -> ConsumeQueueTable:
    t.close()
    return table(tmp_path)


def fill(cq: ConsumeQueue, start: int, stop: int) -> None:
    """Entries [start, stop), entry i pointing at commit-log offset i * 100."""
    for i in range(start, stop):
        cq.put(i, i * 100, 90, 0)


def queue(t: ConsumeQueueTable, topic: str = "t", queue_id: int = 0) -> ConsumeQueue:
    cq = t.get(topic, queue_id)
    assert cq is not None, f"no queue {topic}/{queue_id}"
    return cq


def test_put_get_flush_reload_across_blocks(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    for i in range(20):
        cq.put(i, 1000 + i * 100, 90, i)
    assert (cq.min_index, cq.max_index) == (0, 20)
    assert cq.get(13) == (2300, 90, 13)  # from memory
    assert t.flush() == 20
    assert cq.unflushed == 0
    assert cq.get(13) == (2300, 90, 13)  # from the database
    assert [e.physical_offset for e in cq.entries(6, 5)] == [1600, 1700, 1800, 1900, 2000]
    cq.put(20, 3000, 90, 20)
    assert [e.physical_offset for e in cq.entries(18, 5)] == [2800, 2900, 3000]  # both
    t.flush()
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert (cq.min_index, cq.max_index) == (0, 21)
    assert cq.get(20) == (3000, 90, 20)
    # blocks of BLOCK entries: 21 entries are 3 rows, the last partly filled and grown
    rows = sqlite3.connect(tmp_path / "cq" / DATABASE_NAME).execute(
        "SELECT block, first, length(units) FROM blocks ORDER BY block"
    )
    assert list(rows) == [(0, 0, 160), (1, 8, 160), (2, 16, 100)]


def test_unflushed_entries_are_lost_on_a_crash_and_the_rest_kept(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    fill(cq, 0, 10)
    t.flush()
    fill(cq, 10, 13)
    # no flush: what a kill -9 leaves; the recovery re-dispatches from the log
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert cq.max_index == 10
    cq.put(10, 1000, 90, 0)
    assert cq.max_index == 11


def test_a_queue_costs_a_row_and_no_file(tmp_path: Path) -> None:
    t = table(tmp_path)
    for topic in range(500):
        for q in range(8):
            t.get_or_create(f"topic-{topic}", q).put(0, topic * 8 + q, 10, 0)
    t.flush()
    files = list((tmp_path / "cq").iterdir())
    allowed = {DATABASE_NAME, f"{DATABASE_NAME}-wal", f"{DATABASE_NAME}-shm"}
    assert {f.name for f in files} <= allowed
    size = sum(f.stat().st_size for f in files)
    assert size < 4000 * 200, size  # 4,000 queues of one entry: well under 200 B each
    fds = len(os.listdir("/proc/self/fd"))
    again = reopen(t, tmp_path)
    assert len(again) == 4000
    assert len(os.listdir("/proc/self/fd")) <= fds + 2  # none per queue
    assert queue(again, "topic-499", 7).get(0) == (3999, 10, 0)


def test_replayed_put_is_idempotent_and_conflicts_refused(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    cq.put(0, 10, 5, 0)
    cq.put(0, 10, 5, 0)
    t.flush()
    cq.put(0, 10, 5, 0)
    with pytest.raises(StoreError):
        cq.put(0, 11, 5, 0)
    with pytest.raises(StoreError):
        cq.put(5, 50, 5, 0)  # a gap


def test_retention_past_many_queues_is_one_transaction(tmp_path: Path) -> None:
    """A deleted segment held entries of every queue: their blocks go in one commit
    (one fsync), not one per queue."""
    t = table(tmp_path)
    queues = [t.get_or_create(f"t{n}", 0) for n in range(300)]
    for cq in queues:
        fill(cq, 0, 30)
    t.flush()
    commits: list[str] = []
    t.database._writer.set_trace_callback(
        lambda sql: commits.append(sql) if sql.startswith("COMMIT") else None
    )
    removed = t.delete_before_physical(1750)
    assert removed == 2 * len(queues)  # blocks [0, 8) and [8, 16) of each
    assert len(commits) == 1
    assert all(cq.min_index == 18 for cq in queues)
    again = reopen(t, tmp_path)
    again.delete_before_physical(1750)  # what recovery does with the log's start
    assert all(queue(again, f"t{n}").min_index == 18 for n in range(300))


def test_truncate_and_retention_by_commit_log_offset(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    fill(cq, 0, 30)
    t.flush()
    t.truncate_from_physical(2050)  # entries pointing at or after 2050 go
    assert cq.max_index == 21
    assert cq.get(21) is None
    removed = t.delete_before_physical(1750)
    assert removed == 2 and cq.min_index == 18  # blocks [0, 8) and [8, 16)
    assert cq.get(17) is None and cq.get(18) == (1800, 90, 0)
    cq.put(21, 2100, 90, 0)
    t.flush()
    again = reopen(t, tmp_path)
    again.delete_before_physical(1750)
    cq = queue(again)
    assert (cq.min_index, cq.max_index) == (18, 22)
    assert cq.get(21) == (2100, 90, 0)


def test_truncation_of_unflushed_entries_and_a_flush_after_it(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    fill(cq, 0, 5)
    t.flush()
    fill(cq, 5, 12)
    t.truncate_from_physical(300)  # cuts flushed and unflushed entries alike
    assert cq.max_index == 3
    for i in range(3, 10):
        cq.put(i, 5000 + i, 90, 0)  # a new master's history
    t.flush()
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert cq.max_index == 10
    assert [e.physical_offset for e in cq.entries(0, 10)] == [0, 100, 200] + [
        5000 + i for i in range(3, 10)
    ]


def test_a_queue_cut_to_nothing_keeps_its_place_across_a_restart(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    cq.put(13, 5000, 10, 0)
    t.flush()
    t.truncate_from_physical(5000)
    assert (cq.min_index, cq.max_index) == (13, 13)
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert cq.max_index == 13  # its next message takes offset 13
    with pytest.raises(StoreError):
        cq.put(20, 6000, 10, 0)


def test_retention_keeps_the_last_block_so_a_queue_keeps_its_place(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    fill(cq, 0, 10)
    t.flush()
    t.delete_before_physical(10_000)  # everything is below
    assert cq.min_index == cq.max_index == 10
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert cq.max_index == 10


def test_queue_may_start_mid_block(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    cq.put(13, 5000, 10, 0)
    cq.put(14, 5010, 10, 0)
    assert (cq.min_index, cq.max_index) == (13, 15)
    t.flush()
    cq.put(15, 5020, 10, 0)
    t.flush()
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert (cq.min_index, cq.max_index) == (13, 16)
    assert cq.get(12) is None and cq.get(13) == (5000, 10, 0) and cq.get(15) == (5020, 10, 0)


def test_a_removed_topic_and_a_reset_leave_nothing(tmp_path: Path) -> None:
    t = table(tmp_path)
    for q in range(3):
        t.get_or_create("gone", q).put(0, q, 10, 0)
    t.get_or_create("kept", 0).put(0, 9, 10, 0)
    t.flush()
    t.get_or_create("new", 0)  # made, never flushed
    t.remove_topic("gone")
    t.remove_topic("new")
    again = reopen(t, tmp_path)
    assert sorted((cq.topic, cq.queue_id) for cq in again) == [("kept", 0)]
    again.reset()
    assert len(again) == 0
    assert len(reopen(again, tmp_path)) == 0


def test_a_failed_flush_keeps_everything_for_the_next(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    cq.put(0, 0, 10, 0)
    blocker = sqlite3.connect(tmp_path / "cq" / DATABASE_NAME, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database
    t.database._writer.execute("PRAGMA busy_timeout = 50")
    with pytest.raises(StoreError):
        t.flush()
    blocker.rollback()
    assert cq.unflushed == 1 and cq.get(0) == (0, 10, 0)
    assert t.flush() == 1
    again = reopen(t, tmp_path)
    cq = queue(again)
    assert cq.get(0) == (0, 10, 0)


def test_retention_reaches_entries_not_flushed_yet(tmp_path: Path) -> None:
    t = table(tmp_path)
    cq = t.get_or_create("t", 0)
    fill(cq, 0, 10)
    t.delete_before_physical(450)  # before any flush: all of it is in memory
    assert (cq.min_index, cq.max_index) == (5, 10)
    assert cq.get(4) is None and cq.get(5) == (500, 90, 0)
    t.flush()
    again = reopen(t, tmp_path)
    again.delete_before_physical(450)  # what recovery does with the log's start
    assert (queue(again).min_index, queue(again).max_index) == (5, 10)


def test_a_database_keeps_the_block_size_it_was_made_with(tmp_path: Path) -> None:
    t = table(tmp_path)
    fill(t.get_or_create("t", 0), 0, 20)
    t.flush()
    t.close()
    other = ConsumeQueueTable(tmp_path / "cq", 64)  # a later configuration
    other.load()
    assert other.database.block_entries == BLOCK
    assert [e.physical_offset for e in queue(other).entries(0, 20)] == [i * 100 for i in range(20)]
