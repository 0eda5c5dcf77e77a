"""The member's durable Raft log: replay, torn tails, snapshots and compaction."""

from __future__ import annotations

from pathlib import Path

from rocketcluster.controller.raft.disk import WAL, DiskStorage
from rocketcluster.controller.raft.types import Entry, HardState


def entries(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, f"cmd-{i}".encode()) for i in range(lo, hi)]


def test_replay_rebuilds_log_and_hard_state(tmp_path: Path) -> None:
    s = DiskStorage(tmp_path)
    s.append(entries(1, 6))
    s.set_hard_state(HardState(term=2, vote=3, commit=4))
    s.append([Entry(2, 4, b"new-4")])  # a new leader replaced the tail from 4
    s.sync()
    s.close()
    again = DiskStorage(tmp_path)
    assert [e.index for e in again.all_entries()] == [1, 2, 3, 4]
    assert again.entries(4, 5)[0].data == b"new-4"
    assert again.initial_state() == HardState(2, 3, 4)


def test_a_torn_tail_is_cut(tmp_path: Path) -> None:
    s = DiskStorage(tmp_path)
    s.append(entries(1, 4))
    s.sync()
    s.close()
    with (tmp_path / WAL).open("ab") as f:
        f.write(b"\x00\x00\x00\x20garbage")  # half a record
    again = DiskStorage(tmp_path)
    assert again.torn_bytes > 0 and again.last_index() == 3
    again.append(entries(4, 5))
    again.sync()
    again.close()
    assert DiskStorage(tmp_path).last_index() == 4


def test_snapshot_and_compaction_bound_the_log(tmp_path: Path) -> None:
    s = DiskStorage(tmp_path)
    s.append(entries(1, 501))
    s.set_hard_state(HardState(1, 1, 500))
    s.sync()
    before = s.wal_bytes()
    s.create_snapshot(480, b"state@480")
    s.compact(470)
    assert s.wal_bytes() < before / 10
    s.close()
    again = DiskStorage(tmp_path)
    assert again.snapshot().data == b"state@480" and again.snapshot().metadata.index == 480
    assert again.first_index() == 471 and again.last_index() == 500
    assert again.initial_state().commit == 500
