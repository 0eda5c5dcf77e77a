"""What the leader knows about each follower's log, and the flow control around it.

A follower is in one of three states (etcd's `tracker/`):
- PROBE: we don't know where its log ends; send one append per heartbeat round and walk
  back on rejection.
- REPLICATE: it accepted our last append; stream optimistically, up to
  `max_inflight` unacknowledged appends.
- SNAPSHOT: it needs entries we compacted; a snapshot is on its way and appends pause.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from enum import Enum

from rocketcluster.controller.raft.quorum import VOTE_WON, VoteResult, committed_index, vote_result


class ProgressState(Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


# Members as module constants for the hot paths (see the note in types.py).
PROGRESS_PROBE = ProgressState.PROBE
PROGRESS_REPLICATE = ProgressState.REPLICATE
PROGRESS_SNAPSHOT = ProgressState.SNAPSHOT


class Inflights:
    """Last indexes of appends sent but not acknowledged, oldest first, bounded."""

    __slots__ = ("_items", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, index: int) -> None:
        self._items.append(index)

    def full(self) -> bool:
        return len(self._items) >= self.capacity

    def free_le(self, index: int) -> None:
        """Forget every append up to `index`: the follower acknowledged it."""
        items = self._items
        while items and items[0] <= index:
            items.popleft()

    def reset(self) -> None:
        self._items.clear()


class Progress:
    """One follower as seen by the leader.

    Invariant: `match < next`. `match` only grows while this node stays leader.
    """

    __slots__ = (
        "inflights",
        "match",
        "msg_app_flow_paused",
        "next",
        "pending_snapshot",
        "recent_active",
        "snapshot_stale",
        "state",
    )

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = PROGRESS_PROBE
        self.pending_snapshot = 0
        # Set when the follower answered since the last check-quorum round.
        self.recent_active = False
        # In PROBE: an append is outstanding; in REPLICATE: inflights are full.
        self.msg_app_flow_paused = False
        # A snapshot has been pending across a whole election timeout: resend it.
        self.snapshot_stale = False
        self.inflights = Inflights(max_inflight)

    def __repr__(self) -> str:
        return (
            f"Progress({self.state.value}, match={self.match}, next={self.next}, "
            f"paused={self.msg_app_flow_paused}, pending_snapshot={self.pending_snapshot})"
        )

    def _reset_state(self, state: ProgressState) -> None:
        self.msg_app_flow_paused = False
        self.pending_snapshot = 0
        self.snapshot_stale = False
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state is PROGRESS_SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(PROGRESS_PROBE)
            # Assume the snapshot arrived; a rejection will walk us back if it did not.
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(PROGRESS_PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._reset_state(PROGRESS_REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset_state(PROGRESS_SNAPSHOT)
        self.pending_snapshot = snapshot_index
        self.next = snapshot_index + 1

    def maybe_update(self, index: int) -> bool:
        """The follower acknowledged up to `index`; False if that is old news."""
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        self.msg_app_flow_paused = False
        return True

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """The follower rejected an append at `rejected`; move `next` back.

        False when the rejection is stale (answers an append we already moved past).
        """
        if self.state is PROGRESS_REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.msg_app_flow_paused = False
        return True

    def sent_entries(self, count: int, last_index: int) -> None:
        """Account for an append carrying `count` entries ending at `last_index`."""
        if self.state is PROGRESS_REPLICATE:
            if count:
                self.next = last_index + 1
                self.inflights.add(last_index)
            self.msg_app_flow_paused = self.inflights.full()
        elif self.state is PROGRESS_PROBE and count:
            self.msg_app_flow_paused = True

    def is_paused(self) -> bool:
        if self.state is PROGRESS_SNAPSHOT:
            return True
        return self.msg_app_flow_paused


class ProgressTracker:
    """Progress of every voter (the leader included) and the votes of an election."""

    __slots__ = ("max_inflight", "progress", "voters", "votes")

    def __init__(self, voters: Iterable[int], max_inflight: int) -> None:
        self.voters: tuple[int, ...] = tuple(sorted(set(voters)))
        self.max_inflight = max_inflight
        self.progress: dict[int, Progress] = {v: Progress(1, max_inflight) for v in self.voters}
        self.votes: dict[int, bool] = {}

    def reset(self, last_index: int, self_id: int) -> None:
        """Forget all follower state: called at every term or role change."""
        for voter in self.voters:
            pr = Progress(last_index + 1, self.max_inflight)
            if voter == self_id:
                pr.match = last_index
            self.progress[voter] = pr

    def __iter__(self) -> Iterator[tuple[int, Progress]]:
        return iter(self.progress.items())

    def committed(self) -> int:
        return committed_index([pr.match for pr in self.progress.values()])

    def quorum_active(self, self_id: int) -> bool:
        active = {v: (v == self_id or pr.recent_active) for v, pr in self.progress.items()}
        return vote_result(self.voters, active) is VOTE_WON

    def reset_votes(self) -> None:
        self.votes = {}

    def record_vote(self, voter: int, granted: bool) -> None:
        """Only the first answer of each voter counts (duplicates are ignored)."""
        self.votes.setdefault(voter, granted)

    def tally_votes(self) -> tuple[int, int, VoteResult]:
        granted = sum(1 for v in self.voters if self.votes.get(v) is True)
        rejected = sum(1 for v in self.voters if self.votes.get(v) is False)
        return granted, rejected, vote_result(self.voters, self.votes)
