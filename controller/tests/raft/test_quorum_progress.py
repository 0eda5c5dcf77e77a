from __future__ import annotations

import pytest

from rocketcluster.controller.raft.progress import Progress, ProgressState, ProgressTracker
from rocketcluster.controller.raft.quorum import (
    VoteResult,
    committed_index,
    majority,
    vote_result,
)


@pytest.mark.parametrize(("n", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_majority(n: int, need: int) -> None:
    assert majority(n) == need


@pytest.mark.parametrize(
    ("matches", "expected"),
    [([], 0), ([5], 5), ([5, 3, 1], 3), ([1, 3, 5], 3), ([9, 9, 1, 1, 2], 2), ([7, 7, 7, 0, 0], 7)],
)
def test_committed_index_is_what_a_majority_holds(matches: list[int], expected: int) -> None:
    assert committed_index(matches) == expected


def test_vote_result() -> None:
    voters = (1, 2, 3, 4, 5)
    assert vote_result(voters, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result(voters, {1: True, 2: True, 3: True}) is VoteResult.WON
    assert vote_result(voters, {1: True, 2: False, 3: False}) is VoteResult.PENDING
    assert vote_result(voters, {1: True, 2: False, 3: False, 4: False}) is VoteResult.LOST
    # votes from non-members do not count
    assert vote_result((1, 2, 3), {1: True, 9: True}) is VoteResult.PENDING


def test_tracker_counts_each_voter_once() -> None:
    trk = ProgressTracker((1, 2, 3), max_inflight=4)
    trk.record_vote(1, True)
    trk.record_vote(2, False)
    trk.record_vote(2, True)  # a duplicate answer cannot flip the first one
    assert trk.tally_votes() == (1, 1, VoteResult.PENDING)
    trk.record_vote(3, True)
    assert trk.tally_votes() == (2, 1, VoteResult.WON)


def test_quorum_active_counts_self() -> None:
    trk = ProgressTracker((1, 2, 3), max_inflight=4)
    assert not trk.quorum_active(1)
    trk.progress[2].recent_active = True
    assert trk.quorum_active(1)


def test_probe_pauses_after_one_append_and_backs_off_on_rejection() -> None:
    pr = Progress(next_index=10, max_inflight=4)
    assert pr.state is ProgressState.PROBE and not pr.is_paused()
    pr.sent_entries(2, 11)
    assert pr.is_paused()
    # stale rejection (not for next-1) is ignored
    assert not pr.maybe_decr_to(5, 3)
    # rejection of index 9 with a hint of 4: jump straight to 5
    assert pr.maybe_decr_to(9, 4)
    assert pr.next == 5 and not pr.is_paused()


def test_replicate_streams_until_inflights_are_full() -> None:
    pr = Progress(next_index=1, max_inflight=2)
    pr.maybe_update(3)
    pr.become_replicate()
    assert pr.next == 4
    pr.sent_entries(2, 5)
    assert pr.next == 6 and not pr.is_paused()
    pr.sent_entries(1, 6)
    assert pr.is_paused()
    assert pr.maybe_update(5)
    pr.inflights.free_le(5)
    assert len(pr.inflights) == 1
    # a rejection above match in REPLICATE rewinds to match + 1
    assert pr.maybe_decr_to(6, 0)
    assert pr.next == 6
    assert not pr.maybe_decr_to(4, 0)  # stale: below match


def test_snapshot_state_pauses_and_probe_resumes_after_it() -> None:
    pr = Progress(next_index=3, max_inflight=2)
    pr.become_snapshot(20)
    assert pr.is_paused() and pr.pending_snapshot == 20
    pr.become_probe()
    assert pr.next == 21 and pr.state is ProgressState.PROBE
    assert pr.match < pr.next
