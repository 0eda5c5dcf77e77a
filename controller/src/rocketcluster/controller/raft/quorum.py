"""Majority arithmetic, kept pure so it can be tested on its own (etcd's `quorum/`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum


class VoteResult(Enum):
    PENDING = "pending"
    LOST = "lost"
    WON = "won"


# Members as module constants for the hot paths (see the note in types.py).
VOTE_LOST = VoteResult.LOST
VOTE_PENDING = VoteResult.PENDING
VOTE_WON = VoteResult.WON


def majority(n: int) -> int:
    """Smallest number of members that overlaps every other majority."""
    return n // 2 + 1


def committed_index(matches: Collection[int]) -> int:
    """The highest index held by a majority, given each voter's match index."""
    if not matches:
        return 0
    ordered = sorted(matches, reverse=True)
    return ordered[majority(len(ordered)) - 1]


def vote_result(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority can no longer grant."""
    granted = rejected = 0
    for voter in voters:
        vote = votes.get(voter)
        if vote is None:
            continue
        if vote:
            granted += 1
        else:
            rejected += 1
    need = majority(len(voters))
    if granted >= need:
        return VOTE_WON
    if len(voters) - rejected < need:
        return VOTE_LOST
    return VOTE_PENDING
