from __future__ import annotations

import pytest

from rocketcluster.controller.raft import (
    CompactedError,
    Entry,
    HardState,
    MemoryStorage,
    RaftInvariantError,
    Snapshot,
    SnapshotMetadata,
    SnapshotOutOfDateError,
    UnavailableError,
)
from rocketcluster.controller.raft.log import RaftLog


def ents(*pairs: tuple[int, int]) -> list[Entry]:
    return [Entry(term=t, index=i, data=f"{i}/{t}".encode()) for i, t in pairs]


def test_memory_storage_terms_entries_and_compaction() -> None:
    s = MemoryStorage()
    s.append(ents((1, 1), (2, 1), (3, 2), (4, 2)))
    assert (s.first_index(), s.last_index()) == (1, 4)
    assert s.term(3) == 2
    assert [e.index for e in s.entries(2, 5)] == [2, 3, 4]
    snap = s.create_snapshot(3, b"state")
    assert snap.metadata == SnapshotMetadata(index=3, term=2)
    s.compact(2)
    assert s.first_index() == 3
    assert s.term(2) == 1  # the dummy entry keeps the term before the first one
    with pytest.raises(CompactedError):
        s.term(1)
    with pytest.raises(CompactedError):
        s.entries(2, 4)
    with pytest.raises(UnavailableError):
        s.term(5)
    with pytest.raises(RaftInvariantError):
        s.compact(4)  # beyond the snapshot
    with pytest.raises(SnapshotOutOfDateError):
        s.create_snapshot(3, b"again")


def test_memory_storage_append_truncates_conflicting_suffix() -> None:
    s = MemoryStorage()
    s.append(ents((1, 1), (2, 1), (3, 1)))
    s.append(ents((2, 2)))
    assert [(e.index, e.term) for e in s.all_entries()] == [(1, 1), (2, 2)]
    with pytest.raises(RaftInvariantError):
        s.append(ents((5, 2)))


def test_memory_storage_limits_size_but_returns_at_least_one() -> None:
    s = MemoryStorage()
    s.append([Entry(1, i, b"x" * 10) for i in range(1, 6)])
    assert len(s.entries(1, 6, max_size=0)) == 1
    assert len(s.entries(1, 6, max_size=25)) == 2


def test_apply_snapshot_replaces_the_log() -> None:
    s = MemoryStorage()
    s.append(ents((1, 1), (2, 1)))
    s.apply_snapshot(Snapshot(SnapshotMetadata(index=10, term=3), b"img"))
    assert (s.first_index(), s.last_index(), s.term(10)) == (11, 10, 3)
    with pytest.raises(SnapshotOutOfDateError):
        s.apply_snapshot(Snapshot(SnapshotMetadata(index=5, term=3), b"old"))


def new_log(*pairs: tuple[int, int], commit: int = 0) -> RaftLog:
    s = MemoryStorage()
    s.append(ents(*pairs))
    s.set_hard_state(HardState(term=3, commit=commit))
    log = RaftLog(s)
    log.committed = commit
    return log


def test_maybe_append_truncates_a_conflicting_uncommitted_suffix() -> None:
    log = new_log((1, 1), (2, 1), (3, 1), commit=1)
    assert log.maybe_append(1, 1, 2, ents((2, 2), (3, 2), (4, 2))) == 4
    assert [(e.index, e.term) for e in log.all_entries()] == [(1, 1), (2, 2), (3, 2), (4, 2)]
    assert log.committed == 2
    assert [(e.index, e.term) for e in log.unstable_entries()] == [(2, 2), (3, 2), (4, 2)]


def test_maybe_append_rejects_a_mismatching_prev_entry() -> None:
    log = new_log((1, 1), (2, 1))
    assert log.maybe_append(2, 2, 2, ents((3, 2))) is None
    assert log.maybe_append(5, 1, 2, ents((6, 2))) is None
    assert log.last_index() == 2


def test_overwriting_a_committed_entry_is_an_invariant_error() -> None:
    log = new_log((1, 1), (2, 1), commit=2)
    with pytest.raises(RaftInvariantError) as info:
        log.maybe_append(1, 1, 2, ents((2, 2)))
    assert info.value.invariant == "committed entries are never overwritten"


def test_maybe_append_keeps_entries_already_present() -> None:
    log = new_log((1, 1), (2, 1), (3, 1))
    # a delayed, shorter append must not truncate entries it does not conflict with
    assert log.maybe_append(1, 1, 0, ents((2, 1))) == 2
    assert log.last_index() == 3


def test_commit_cannot_exceed_the_log_and_never_goes_back() -> None:
    log = new_log((1, 1), (2, 1))
    log.commit_to(2)
    log.commit_to(1)
    assert log.committed == 2
    with pytest.raises(RaftInvariantError):
        log.commit_to(3)


def test_maybe_commit_only_for_an_entry_of_the_given_term() -> None:
    log = new_log((1, 1), (2, 2), (3, 3))
    assert not log.maybe_commit(2, 3)
    assert log.committed == 0
    assert log.maybe_commit(3, 3)
    assert log.committed == 3


def test_find_conflict_by_term_skips_whole_terms() -> None:
    log = new_log((1, 1), (2, 1), (3, 2), (4, 4), (5, 4), (6, 4))
    assert log.find_conflict_by_term(6, 3) == (3, 2)
    assert log.find_conflict_by_term(6, 4) == (6, 4)
    assert log.find_conflict_by_term(6, 0) == (0, 0)


def test_stable_to_ignores_entries_replaced_since_ready() -> None:
    log = new_log((1, 1))
    log.append(ents((2, 1), (3, 1)))
    # the driver took [2, 3] (term 1); meanwhile index 3 was replaced by a new leader
    log.append(ents((3, 2)))
    log.stable_to(3, 1)
    assert [(e.index, e.term) for e in log.unstable_entries()] == [(2, 1), (3, 2)]
    log.stable_to(3, 2)
    assert log.unstable_entries() == []


def test_slice_spans_storage_and_unstable_tail() -> None:
    storage = MemoryStorage()
    storage.append(ents((1, 1), (2, 1)))
    log = RaftLog(storage)
    log.append(ents((3, 2), (4, 2)))
    assert [e.index for e in log.slice(2, 5)] == [2, 3, 4]
    with pytest.raises(UnavailableError):
        log.slice(2, 6)
    storage.create_snapshot(2, b"")
    storage.compact(2)
    with pytest.raises(CompactedError):
        log.slice(2, 4)
    assert log.term_or_zero(1) == 0
    assert log.term(2) == 1


def test_restore_adopts_snapshot_as_committed() -> None:
    log = new_log((1, 1), (2, 1), commit=1)
    log.restore(Snapshot(SnapshotMetadata(index=9, term=4), b"img"))
    assert (log.first_index(), log.last_index(), log.committed, log.last_term()) == (10, 9, 9, 4)
    assert not log.has_next_committed_entries()
