"""The Raft protocol itself: a state machine from (messages, ticks) to (messages, log).

No I/O, no clock, no asyncio. Randomness comes only from the injected `random.Random`
(election timeout jitter), so a seed replays a run exactly. Outputs accumulate in
`msgs` and in the log's unstable part; `RawNode` packages them as a `Ready`.

Roles swap the step and tick behaviour (`become_*` sets `_step` and `_tick`); `step`
settles the term first, then dispatches by role. The leader's half lives in `leader.py`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from enum import Enum

from rocketcluster.controller.raft import leader
from rocketcluster.controller.raft.config import Config
from rocketcluster.controller.raft.errors import (
    NotLeaderError,
    RaftInvariantError,
)
from rocketcluster.controller.raft.log import RaftLog
from rocketcluster.controller.raft.progress import ProgressTracker
from rocketcluster.controller.raft.quorum import VOTE_LOST, VOTE_WON, VoteResult, vote_result
from rocketcluster.controller.raft.storage import Storage
from rocketcluster.controller.raft.types import (
    MSG_APP,
    MSG_APP_RESP,
    MSG_BEAT,
    MSG_CHECK_QUORUM,
    MSG_HEARTBEAT,
    MSG_HEARTBEAT_RESP,
    MSG_HUP,
    MSG_PRE_VOTE,
    MSG_PRE_VOTE_RESP,
    MSG_PROP,
    MSG_SNAP,
    MSG_TIMEOUT_NOW,
    MSG_TRANSFER_LEADER,
    MSG_VOTE,
    MSG_VOTE_RESP,
    NO_NODE,
    STATE_CANDIDATE,
    STATE_FOLLOWER,
    STATE_LEADER,
    STATE_PRE_CANDIDATE,
    Entry,
    HardState,
    Message,
    MessageType,
    Snapshot,
    SoftState,
)

_VOTE_RESPONSE = {
    MessageType.VOTE: MessageType.VOTE_RESP,
    MessageType.PRE_VOTE: MessageType.PRE_VOTE_RESP,
}
_VOTE_REQUESTS = frozenset(_VOTE_RESPONSE)


class CampaignType(Enum):
    PRE_ELECTION = "pre-election"  # poll first, term unchanged (pre-vote)
    ELECTION = "election"  # bump the term and ask for votes
    TRANSFER = "transfer"  # like ELECTION, but voters ignore their leader lease


# Members as module constants for the hot paths (see the note in types.py).
_ELECTION = CampaignType.ELECTION
_PRE_ELECTION = CampaignType.PRE_ELECTION
_TRANSFER = CampaignType.TRANSFER


class Raft:
    """One member's protocol state.

    Invariants: `term` never decreases; `vote` is NO_NODE or the one candidate this node
    voted for in `term`; `lead == id` exactly when `state is LEADER`.
    """

    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        config.validate()
        self.id = config.id
        self.raft_log = RaftLog(storage, config.max_committed_size_per_ready)
        self.trk = ProgressTracker(config.voters, config.max_inflight_msgs)
        self.term = 0
        self.vote = NO_NODE
        self.lead = NO_NODE
        self.state = STATE_FOLLOWER
        # Messages to send once this step's log and hard state are durable.
        self.msgs: list[Message] = []
        self.lead_transferee = NO_NODE
        self.election_timeout = config.election_tick
        self.heartbeat_timeout = config.heartbeat_tick
        self.check_quorum = config.check_quorum
        self.pre_vote = config.pre_vote
        self.max_msg_size = config.max_size_per_msg
        self.max_uncommitted = config.max_uncommitted_entries
        # Ticks since the last election timeout reset (followers: since we heard the
        # leader or granted a vote; leader: since the last check-quorum round).
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = config.election_tick
        self._rng = rng
        # Elections this member started as a candidate (term bumped; pre-votes are
        # polls, not elections, and are not counted). Volatile: for metrics only.
        self.elections_started = 0
        self._step: Callable[[Message], None] = self._step_follower
        self._tick: Callable[[], None] = self._tick_election

        hard_state = storage.initial_state()
        if not hard_state.is_empty:
            self.load_state(hard_state)
        if config.applied > 0:
            self.raft_log.applied_to(config.applied)
        self.become_follower(self.term, NO_NODE)

    # --- views ------------------------------------------------------------------------

    def soft_state(self) -> SoftState:
        return SoftState(self.lead if self.lead != NO_NODE else None, self.state)

    def hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.raft_log.committed)

    def load_state(self, hard_state: HardState) -> None:
        log = self.raft_log
        if hard_state.commit > log.last_index():
            raise RaftInvariantError(
                "persisted commit within the persisted log",
                f"commit {hard_state.commit} beyond last index {log.last_index()}: "
                "entries acknowledged as durable were lost",
            )
        # A snapshot newer than the persisted commit (the driver crashed between writing
        # the two) is still committed by definition: keep the larger.
        log.committed = max(log.committed, hard_state.commit)
        self.term = hard_state.term
        self.vote = hard_state.vote

    # --- sending ----------------------------------------------------------------------

    def send(self, m: Message) -> None:
        self.msgs.append(m)

    # --- role changes -----------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = NO_NODE
        self.lead = NO_NODE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._reset_randomized_election_timeout()
        self.abort_leader_transfer()
        self.trk.reset_votes()
        self.trk.reset(self.raft_log.last_index(), self.id)

    def become_follower(self, term: int, lead: int) -> None:
        self._step = self._step_follower
        self._reset(term)
        self._tick = self._tick_election
        self.lead = lead
        self.state = STATE_FOLLOWER

    def become_pre_candidate(self) -> None:
        """Poll for votes without touching term or vote: losing costs the cluster nothing."""
        if self.state is STATE_LEADER:
            raise RaftInvariantError("no leader to pre-candidate transition", f"node {self.id}")
        self._step = self._step_candidate
        self.trk.reset_votes()
        self._tick = self._tick_election
        self.lead = NO_NODE
        self.state = STATE_PRE_CANDIDATE

    def become_candidate(self) -> None:
        if self.state is STATE_LEADER:
            raise RaftInvariantError("no leader to candidate transition", f"node {self.id}")
        self._step = self._step_candidate
        self._reset(self.term + 1)
        self._tick = self._tick_election
        self.vote = self.id
        self.state = STATE_CANDIDATE
        self.elections_started += 1

    def become_leader(self) -> None:
        if self.state is STATE_FOLLOWER:
            raise RaftInvariantError("no follower to leader transition", f"node {self.id}")
        self._step = self._step_leader
        self._reset(self.term)
        self._tick = self._tick_heartbeat
        self.lead = self.id
        self.state = STATE_LEADER
        own = self.trk.progress[self.id]
        own.become_replicate()
        own.recent_active = True
        # An entry of our own term: until it commits we cannot tell which earlier entries
        # are committed (Raft §5.4.2), so commit it at once.
        self.append_entries([b""])

    # --- ticks ------------------------------------------------------------------------

    def tick(self) -> None:
        self._tick()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self.step(Message(type=MSG_HUP, to=self.id, from_id=self.id))

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.election_timeout:
            self.election_elapsed = 0
            if self.check_quorum:
                self.step(Message(type=MSG_CHECK_QUORUM, to=self.id, from_id=self.id))
            if self.state is STATE_LEADER:
                # A transfer that did not finish within an election timeout is abandoned
                # so proposals flow again.
                self.abort_leader_transfer()
                leader.retry_stale_snapshots(self)
        if self.state is not STATE_LEADER:
            return
        if self.heartbeat_elapsed >= self.heartbeat_timeout:
            self.heartbeat_elapsed = 0
            self.step(Message(type=MSG_BEAT, to=self.id, from_id=self.id))

    def _reset_randomized_election_timeout(self) -> None:
        timeout = self.election_timeout
        self.randomized_election_timeout = timeout + self._rng.randrange(timeout)

    # --- elections --------------------------------------------------------------------

    def _hup(self, campaign: CampaignType) -> None:
        if self.state is STATE_LEADER:
            return
        self._campaign(campaign)

    def _campaign(self, campaign: CampaignType) -> None:
        if campaign is _PRE_ELECTION:
            self.become_pre_candidate()
            vote_type = MSG_PRE_VOTE
            term = self.term + 1  # the term we would run in; ours stays put
        else:
            self.become_candidate()
            vote_type = MSG_VOTE
            term = self.term
        if self._poll(self.id, True) is VOTE_WON:
            # A single-member cluster wins on its own vote.
            if campaign is _PRE_ELECTION:
                self._campaign(_ELECTION)
            else:
                self.become_leader()
            return
        last_index = self.raft_log.last_index()
        last_term = self.raft_log.last_term()
        transfer = campaign is _TRANSFER
        for voter in self.trk.voters:
            if voter == self.id:
                continue
            self.send(
                Message(
                    type=vote_type,
                    to=voter,
                    from_id=self.id,
                    term=term,
                    index=last_index,
                    log_term=last_term,
                    transfer=transfer,
                )
            )

    def _poll(self, voter: int, granted: bool) -> VoteResult:
        trk = self.trk
        trk.record_vote(voter, granted)
        return vote_result(trk.voters, trk.votes)  # (tally_votes also counts; not needed)

    # --- step -------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        """Apply one message. Raises `ProposalDroppedError` for proposals it cannot take."""
        if m.term == 0:
            pass  # local message
        elif m.term > self.term:
            if m.type in _VOTE_REQUESTS:
                in_lease = (
                    self.check_quorum
                    and self.lead != NO_NODE
                    and self.election_elapsed < self.election_timeout
                )
                if in_lease and not m.transfer:
                    # We heard a leader within the minimum election timeout: a candidate
                    # this far ahead is disruptive (e.g. just back from a partition).
                    return
            if m.type is MSG_PRE_VOTE:
                pass  # a pre-vote never changes our term
            elif m.type is MSG_PRE_VOTE_RESP and not m.reject:
                pass  # granted pre-votes carry the term we would run in
            elif m.type in (MSG_APP, MSG_HEARTBEAT, MSG_SNAP):
                self.become_follower(m.term, m.from_id)
            else:
                self.become_follower(m.term, NO_NODE)
        elif m.term < self.term:
            if (self.check_quorum or self.pre_vote) and m.type in (
                MSG_HEARTBEAT,
                MSG_APP,
            ):
                # A stale leader cut off by a partition: tell it our term so it steps
                # down. Ignoring it could leave the cluster stuck, since with pre-vote
                # and check-quorum its followers would never bump their terms.
                self.send(Message(type=MSG_APP_RESP, to=m.from_id, from_id=self.id, term=self.term))
            elif m.type is MSG_PRE_VOTE:
                self.send(
                    Message(
                        type=MSG_PRE_VOTE_RESP,
                        to=m.from_id,
                        from_id=self.id,
                        term=self.term,
                        reject=True,
                    )
                )
            return

        if m.type is MSG_HUP:
            self._hup(_PRE_ELECTION if self.pre_vote else _ELECTION)
        elif m.type in _VOTE_REQUESTS:
            self._handle_vote_request(m)
        else:
            self._step(m)

    def _handle_vote_request(self, m: Message) -> None:
        can_vote = (
            self.vote == m.from_id
            or (self.vote == NO_NODE and self.lead == NO_NODE)
            or (m.type is MSG_PRE_VOTE and m.term > self.term)
        )
        resp_type = _VOTE_RESPONSE[m.type]
        if can_vote and self.raft_log.is_up_to_date(m.index, m.log_term):
            # Answer with the candidate's term, not ours: a pre-candidate would ignore a
            # grant carrying our (possibly older) term.
            self.send(Message(type=resp_type, to=m.from_id, from_id=self.id, term=m.term))
            if m.type is MSG_VOTE:
                self.election_elapsed = 0
                self.vote = m.from_id
        else:
            self.send(
                Message(type=resp_type, to=m.from_id, from_id=self.id, term=self.term, reject=True)
            )

    def _step_leader(self, m: Message) -> None:
        leader.step_leader(self, m)

    def _step_candidate(self, m: Message) -> None:
        t = m.type
        if t is MSG_PROP:
            raise NotLeaderError(self.id, None, self.term)
        if t is MSG_APP:
            self.become_follower(m.term, m.from_id)
            self._handle_append_entries(m)
        elif t is MSG_HEARTBEAT:
            self.become_follower(m.term, m.from_id)
            self._handle_heartbeat(m)
        elif t is MSG_SNAP:
            self.become_follower(m.term, m.from_id)
            self._handle_snapshot(m)
        elif (t is MSG_PRE_VOTE_RESP and self.state is STATE_PRE_CANDIDATE) or (
            t is MSG_VOTE_RESP and self.state is STATE_CANDIDATE
        ):
            result = self._poll(m.from_id, not m.reject)
            if result is VOTE_WON:
                if self.state is STATE_PRE_CANDIDATE:
                    self._campaign(_ELECTION)
                else:
                    self.become_leader()
                    leader.bcast_append(self)
            elif result is VOTE_LOST:
                # A pre-vote answer carries our future term; stay in ours.
                self.become_follower(self.term, NO_NODE)
        # TIMEOUT_NOW, TRANSFER_LEADER and stray responses are ignored by candidates.

    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t is MSG_PROP:
            raise NotLeaderError(self.id, self.lead if self.lead != NO_NODE else None, self.term)
        if t is MSG_APP:
            self.election_elapsed = 0
            self.lead = m.from_id
            self._handle_append_entries(m)
        elif t is MSG_HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.from_id
            self._handle_heartbeat(m)
        elif t is MSG_SNAP:
            self.election_elapsed = 0
            self.lead = m.from_id
            self._handle_snapshot(m)
        elif t is MSG_TRANSFER_LEADER:
            if self.lead != NO_NODE:
                self.send(
                    Message(
                        type=MSG_TRANSFER_LEADER,
                        to=self.lead,
                        from_id=m.from_id,
                        term=self.term,
                    )
                )
        elif t is MSG_TIMEOUT_NOW:
            # The leader picked us: campaign at once, without pre-vote; there is no
            # partition to guard against and the old leader is waiting.
            self._hup(_TRANSFER)

    # --- follower handlers ------------------------------------------------------------

    def _handle_append_entries(self, m: Message) -> None:
        log = self.raft_log
        if m.index < log.committed:
            self.send(
                Message(
                    type=MSG_APP_RESP,
                    to=m.from_id,
                    from_id=self.id,
                    term=self.term,
                    index=log.committed,
                )
            )
            return
        last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is not None:
            self.send(
                Message(
                    type=MSG_APP_RESP,
                    to=m.from_id,
                    from_id=self.id,
                    term=self.term,
                    index=last_new,
                )
            )
            return
        # Reject, with a hint: the last index whose term is <= the leader's term at
        # m.index. Every entry above it conflicts, so the leader can skip them all.
        hint_index, hint_term = log.find_conflict_by_term(
            min(m.index, log.last_index()), m.log_term
        )
        self.send(
            Message(
                type=MSG_APP_RESP,
                to=m.from_id,
                from_id=self.id,
                term=self.term,
                index=m.index,
                reject=True,
                reject_hint=hint_index,
                log_term=hint_term,
            )
        )

    def _handle_heartbeat(self, m: Message) -> None:
        self.raft_log.commit_to(m.commit)
        self.send(Message(type=MSG_HEARTBEAT_RESP, to=m.from_id, from_id=self.id, term=self.term))

    def _handle_snapshot(self, m: Message) -> None:
        snapshot = m.snapshot
        if snapshot is None:
            raise RaftInvariantError("SNAP carries a snapshot", f"from node {m.from_id}")
        index = self.raft_log.last_index() if self._restore(snapshot) else self.raft_log.committed
        self.send(
            Message(
                type=MSG_APP_RESP,
                to=m.from_id,
                from_id=self.id,
                term=self.term,
                index=index,
            )
        )

    def _restore(self, snapshot: Snapshot) -> bool:
        """Install `snapshot` if it tells us something new. False when we already had it."""
        meta = snapshot.metadata
        log = self.raft_log
        if meta.index <= log.committed:
            return False
        if self.state is not STATE_FOLLOWER:
            # Only a follower of this term's leader should get here; be defensive.
            self.become_follower(self.term + 1, NO_NODE)
            return False
        if log.match_term(meta.index, meta.term):
            # Our log already holds the snapshot's last entry: just fast-forward commit.
            log.commit_to(meta.index)
            return False
        log.restore(snapshot)
        return True

    # --- leader helpers used by RawNode and leader.py ---------------------------------

    def append_entries(self, payloads: Sequence[bytes]) -> int:
        """Append new entries of our term to the leader's log; return the last index."""
        log = self.raft_log
        first = log.last_index() + 1
        term = self.term
        entries = [Entry(term=term, index=first + i, data=d) for i, d in enumerate(payloads)]
        last = log.append(entries)
        self.trk.progress[self.id].maybe_update(last)
        self.maybe_commit()
        return last

    def maybe_commit(self) -> bool:
        return self.raft_log.maybe_commit(self.trk.committed(), self.term)

    def abort_leader_transfer(self) -> None:
        self.lead_transferee = NO_NODE
