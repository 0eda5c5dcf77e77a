"""The leader's half of the protocol: replication, commit, heartbeats, transfer.

Functions over the node's state rather than methods, to keep each module small;
`core.py` calls them when the node is leader. They see the node through `LeaderNode`,
the part of `core.Raft` they use, so this module does not import the core back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rocketcluster.controller.raft.errors import (
    CompactedError,
    LeadershipTransferInProgressError,
    RaftInvariantError,
    SnapshotTemporarilyUnavailableError,
    UnavailableError,
    UncommittedBacklogFullError,
)
from rocketcluster.controller.raft.log import RaftLog
from rocketcluster.controller.raft.progress import (
    PROGRESS_PROBE,
    PROGRESS_REPLICATE,
    PROGRESS_SNAPSHOT,
    Progress,
    ProgressTracker,
)
from rocketcluster.controller.raft.types import (
    MSG_APP,
    MSG_APP_RESP,
    MSG_BEAT,
    MSG_CHECK_QUORUM,
    MSG_HEARTBEAT,
    MSG_HEARTBEAT_RESP,
    MSG_PROP,
    MSG_SNAP,
    MSG_SNAP_STATUS,
    MSG_TIMEOUT_NOW,
    MSG_TRANSFER_LEADER,
    MSG_UNREACHABLE,
    NO_NODE,
    STATE_LEADER,
    Entry,
    Message,
    StateType,
)


class LeaderNode(Protocol):
    """What the leader's functions read and change on the node (`core.Raft`)."""

    id: int
    term: int
    state: StateType
    raft_log: RaftLog
    trk: ProgressTracker
    lead_transferee: int
    election_elapsed: int
    max_msg_size: int | None
    max_uncommitted: int | None

    def send(self, m: Message) -> None: ...
    def become_follower(self, term: int, lead: int) -> None: ...
    def append_entries(self, payloads: Sequence[bytes]) -> int: ...
    def maybe_commit(self) -> bool: ...
    def abort_leader_transfer(self) -> None: ...


def step_leader(r: LeaderNode, m: Message) -> None:
    t = m.type
    if t is MSG_BEAT:
        bcast_heartbeat(r)
        return
    if t is MSG_CHECK_QUORUM:
        if not r.trk.quorum_active(r.id):
            # We cannot hear a majority: a new leader may already exist on the other
            # side. Stop serving so clients go looking for it.
            r.become_follower(r.term, NO_NODE)
        for voter, peer in r.trk:
            if voter != r.id:
                peer.recent_active = False
        return
    if t is MSG_PROP:
        if r.lead_transferee != NO_NODE:
            raise LeadershipTransferInProgressError(r.id, r.lead_transferee, r.term)
        if not m.entries:
            raise RaftInvariantError("proposals carry entries", f"empty PROP to {r.id}")
        limit = r.max_uncommitted
        uncommitted = r.raft_log.last_index() - r.raft_log.committed
        if limit is not None and uncommitted + len(m.entries) > limit:
            raise UncommittedBacklogFullError(r.id, uncommitted, limit)
        r.append_entries([e.data for e in m.entries])
        bcast_append(r)
        return

    pr = r.trk.progress.get(m.from_id)
    if pr is None:
        return
    if t is MSG_APP_RESP:
        _handle_append_response(r, m, pr)
    elif t is MSG_HEARTBEAT_RESP:
        pr.recent_active = True
        pr.msg_app_flow_paused = False
        # Also covers REPLICATE with full inflights whose appends were all lost: one
        # (possibly empty) append goes out, and its answer clears the jam.
        if pr.match < r.raft_log.last_index() or pr.state is PROGRESS_PROBE:
            send_append(r, m.from_id)
    elif t is MSG_SNAP_STATUS:
        if pr.state is not PROGRESS_SNAPSHOT:
            return
        if m.reject:
            pr.pending_snapshot = 0  # it did not arrive: probe from match again
        pr.become_probe()
        # Wait for a heartbeat answer before the next append, so a follower still
        # applying the snapshot is not flooded.
        pr.msg_app_flow_paused = True
    elif t is MSG_UNREACHABLE:
        if pr.state is PROGRESS_REPLICATE:
            pr.become_probe()
    elif t is MSG_TRANSFER_LEADER:
        _handle_transfer_leader(r, m.from_id, pr)


def _handle_append_response(r: LeaderNode, m: Message, pr: Progress) -> None:
    pr.recent_active = True
    if m.reject:
        next_probe = m.reject_hint
        if m.log_term > 0:
            # Skip every entry of ours whose term is above the follower's term at the
            # hint: none of them can match.
            next_probe, _ = r.raft_log.find_conflict_by_term(m.reject_hint, m.log_term)
        if pr.maybe_decr_to(m.index, next_probe):
            if pr.state is PROGRESS_REPLICATE:
                pr.become_probe()
            send_append(r, m.from_id)
        return

    old_paused = pr.is_paused()
    if not (pr.maybe_update(m.index) or (pr.match == m.index and pr.state is PROGRESS_PROBE)):
        return
    if pr.state is PROGRESS_PROBE:
        pr.become_replicate()
    elif pr.state is PROGRESS_SNAPSHOT and pr.match + 1 >= r.raft_log.first_index():
        # The follower caught up past our compaction point (the snapshot arrived, or
        # entries did): resume normal replication.
        pr.become_probe()
        pr.become_replicate()
    elif pr.state is PROGRESS_REPLICATE:
        pr.inflights.free_le(m.index)

    if r.maybe_commit():
        bcast_append(r)
    elif old_paused:
        send_append(r, m.from_id)
    # Flow control may now allow several size-limited appends in a row.
    while maybe_send_append(r, m.from_id, send_if_empty=False):
        pass
    if m.from_id == r.lead_transferee and pr.match == r.raft_log.last_index():
        send_timeout_now(r, m.from_id)


def _handle_transfer_leader(r: LeaderNode, transferee: int, pr: Progress) -> None:
    if r.lead_transferee != NO_NODE:
        if r.lead_transferee == transferee:
            return  # already on its way
        r.abort_leader_transfer()
    if transferee == r.id:
        return
    # The transfer must finish within an election timeout (see Raft._tick_heartbeat).
    r.election_elapsed = 0
    r.lead_transferee = transferee
    if pr.match == r.raft_log.last_index():
        send_timeout_now(r, transferee)
    else:
        send_append(r, transferee)


def send_timeout_now(r: LeaderNode, to: int) -> None:
    r.send(Message(type=MSG_TIMEOUT_NOW, to=to, from_id=r.id, term=r.term))


def send_append(r: LeaderNode, to: int) -> None:
    maybe_send_append(r, to, send_if_empty=True)


def maybe_send_append(r: LeaderNode, to: int, *, send_if_empty: bool) -> bool:
    """Send `to` the entries it lacks (or a snapshot); False if nothing was sent."""
    pr = r.trk.progress[to]
    if pr.is_paused():
        return False
    log = r.raft_log
    prev_index = pr.next - 1
    try:
        prev_term = log.term(prev_index)
    except (CompactedError, UnavailableError):
        # The entries it needs were compacted away: only a snapshot can catch it up.
        return _maybe_send_snapshot(r, to, pr)
    entries: list[Entry] = []
    # A throttled REPLICATE follower only gets empty appends, which still make progress
    # if every append filling the window was lost.
    if pr.state is not PROGRESS_REPLICATE or not pr.inflights.full():
        try:
            entries = log.entries(pr.next, r.max_msg_size)
        except CompactedError:
            return _maybe_send_snapshot(r, to, pr)
    if not entries and not send_if_empty:
        return False
    r.send(
        Message(
            type=MSG_APP,
            to=to,
            from_id=r.id,
            term=r.term,
            index=prev_index,
            log_term=prev_term,
            entries=tuple(entries),
            commit=log.committed,
        )
    )
    pr.sent_entries(len(entries), entries[-1].index if entries else prev_index)
    return True


def _maybe_send_snapshot(r: LeaderNode, to: int, pr: Progress) -> bool:
    if not pr.recent_active:
        # Snapshots are expensive; wait until the follower has answered this leader.
        return False
    try:
        snapshot = r.raft_log.snapshot()
    except SnapshotTemporarilyUnavailableError:
        return False
    if snapshot.is_empty:
        raise RaftInvariantError(
            "a compacted log has a snapshot",
            f"follower {to} needs index {pr.next} but no snapshot exists",
        )
    pr.become_snapshot(snapshot.metadata.index)
    r.send(Message(type=MSG_SNAP, to=to, from_id=r.id, term=r.term, snapshot=snapshot))
    return True


def bcast_append(r: LeaderNode) -> None:
    for voter in r.trk.voters:
        if voter != r.id:
            send_append(r, voter)


def bcast_heartbeat(r: LeaderNode) -> None:
    committed = r.raft_log.committed
    for voter, pr in r.trk:
        if voter == r.id:
            continue
        # Never tell a follower to commit past what it is known to hold: its log beyond
        # `match` may still differ from ours.
        r.send(
            Message(
                type=MSG_HEARTBEAT,
                to=voter,
                from_id=r.id,
                term=r.term,
                commit=min(pr.match, committed),
            )
        )


def retry_stale_snapshots(r: LeaderNode) -> None:
    """Resend snapshots pending for a whole election timeout.

    A lost InstallSnapshot leaves the follower in SNAPSHOT state (appends paused) until
    the driver reports the outcome; transports that cannot tell (a datagram lost, the
    follower crashed before persisting) would stall it forever without this fallback.
    """
    if r.state is not STATE_LEADER:
        return
    for voter, pr in r.trk:
        if voter == r.id or pr.state is not PROGRESS_SNAPSHOT:
            continue
        if pr.snapshot_stale:
            pr.become_probe()
        else:
            pr.snapshot_stale = True
