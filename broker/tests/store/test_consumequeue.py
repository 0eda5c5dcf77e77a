from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.errors import StoreError


def make(tmp_path: Path) -> ConsumeQueue:
    return ConsumeQueue(tmp_path / "t" / "0", "t", 0, 8)


def test_put_get_reload_across_files(tmp_path: Path) -> None:
    cq = make(tmp_path)
    for i in range(20):
        cq.put(i, 1000 + i * 100, 90, i)
    assert (cq.min_index, cq.max_index) == (0, 20)
    assert cq.get(13) == (2300, 90, 13)
    assert [e.physical_offset for e in cq.entries(6, 5)] == [1600, 1700]  # stops at a file end
    cq.flush()
    cq.close()
    again = make(tmp_path)
    assert again.load() == []
    assert (again.min_index, again.max_index) == (0, 20)
    assert again.get(19) == (2900, 90, 19)


def test_replayed_put_is_idempotent_and_conflicts_refused(tmp_path: Path) -> None:
    cq = make(tmp_path)
    cq.put(0, 10, 5, 0)
    cq.put(0, 10, 5, 0)
    with pytest.raises(StoreError):
        cq.put(0, 11, 5, 0)
    with pytest.raises(StoreError):
        cq.put(5, 50, 5, 0)  # a gap


def test_truncate_and_retention_by_commit_log_offset(tmp_path: Path) -> None:
    cq = make(tmp_path)
    for i in range(30):
        cq.put(i, i * 100, 90, 0)
    cq.truncate_from_physical(2050)  # entries pointing at or after 2050 go
    assert cq.max_index == 21
    assert cq.get(21) is None
    removed = cq.delete_before_physical(1750)
    assert removed == 2 and cq.min_index == 18
    cq.put(21, 2100, 90, 0)
    cq.close()
    again = make(tmp_path)
    again.load()
    again.delete_before_physical(1750)
    assert (again.min_index, again.max_index) == (18, 22)


def test_queue_may_start_mid_file(tmp_path: Path) -> None:
    cq = make(tmp_path)
    cq.put(13, 5000, 10, 0)
    cq.put(14, 5010, 10, 0)
    assert (cq.min_index, cq.max_index) == (13, 15)
    cq.close()
    again = make(tmp_path)
    again.load()
    assert (again.min_index, again.max_index) == (13, 15)
    assert again.get(12) is None and again.get(13) == (5000, 10, 0)
