from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.broker.store import record
from rocketcluster.broker.store.commitlog import CommitLog
from rocketcluster.broker.store.errors import OffsetRemovedError, ReadPastEndError, StoreError
from rocketcluster.broker.store.record import MessageToStore


def make_log(tmp_path: Path, segment_size: int = 4096) -> CommitLog:
    directory = tmp_path / "commitlog"
    directory.mkdir()
    return CommitLog(directory, segment_size)


def msg(i: int, size: int = 300) -> MessageToStore:
    return MessageToStore.build("t", i % 2, bytes([i % 256]) * size, msg_id=f"m{i}")


def test_records_never_cross_segments_and_blank_fills_the_end(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    results = log.append([msg(i) for i in range(40)], 1)
    for rec in results:
        assert rec.physical_offset // 4096 == (rec.physical_offset + rec.size - 1) // 4096
    assert len(log.segments) > 2
    names = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
    assert names == [f"{i * 4096:020d}" for i in range(len(names))]
    assert all((tmp_path / "commitlog" / n).stat().st_size == 4096 for n in names)
    decoded = list(log.iter_records(0))
    assert [m.msg_id for m in decoded] == [f"m{i}" for i in range(40)]
    assert [m.queue_offset for m in decoded if m.queue_id == 0] == list(range(20))
    first_end = results[0].physical_offset
    blank_at = max(r.physical_offset + r.size for r in results if r.physical_offset < 4096)
    head = log.read(blank_at, 8) if blank_at + 8 <= log.committed_offset else b""
    assert head and record.BLANK_HEADER.unpack(head)[1] == record.BLANK_MAGIC
    assert first_end == 0


def test_batch_larger_than_a_segment_is_split(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    results = log.append([msg(i, 900) for i in range(12)], 1)
    assert len({r.physical_offset // 4096 for r in results}) >= 3
    assert [m.msg_id for m in log.iter_records(0)] == [f"m{i}" for i in range(12)]


def test_reads_outside_the_log_are_clear_errors(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    rec = log.append([msg(1)], 1)[0]
    with pytest.raises(ReadPastEndError):
        log.read(rec.physical_offset, rec.size + 1)
    with pytest.raises(ReadPastEndError):
        log.read(10**9, 10)
    log.append([msg(i) for i in range(60)], 1)
    log.flush_to(log.committed_offset)
    log.delete_head_segments(1)
    with pytest.raises(OffsetRemovedError):
        log.read(0, 10)


def test_deferred_writes_are_invisible_until_committed(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    rec = log.append([msg(1)], 1, defer_write=True)[0]
    assert log.write_offset == rec.size and log.committed_offset == 0
    with pytest.raises(ReadPastEndError):
        log.read(0, rec.size)
    assert log.commit() == rec.size
    assert log.read_message(0, rec.size).msg_id == "m1"
    assert log.flush_to(log.write_offset) == rec.size


def test_truncate_zeroes_the_tail_and_drops_later_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    results = log.append([msg(i) for i in range(30)], 1)
    cut = results[5].physical_offset
    dropped = log.truncate(cut)
    assert dropped and log.write_offset == cut
    assert log.read(0, cut)  # the kept part is intact
    seg = log.segments[-1]
    assert seg.pread(cut, seg.end - cut) == bytes(seg.end - cut)
    with pytest.raises(StoreError):
        log.truncate(cut + 1)
    # Queue offsets are the caller's to rebuild; appends continue at the cut.
    log.queue_offsets = {("t", 0): 3, ("t", 1): 2}
    again = log.append([msg(99)], 1)[0]
    assert again.physical_offset == cut


def test_head_deletion_keeps_unflushed_and_current_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append([msg(i) for i in range(60)], 1)
    total = len(log.segments)
    assert log.delete_head_segments(10) == []  # nothing flushed yet
    log.flush_to(log.committed_offset)
    removed = log.delete_head_segments(100)
    assert len(removed) == total - 1 and len(log.segments) == 1
    assert log.min_offset == log.segments[0].base
