"""Protocol scenarios on a hand-driven cluster (see harness.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rocketcluster.controller.raft import (
    LeadershipTransferInProgressError,
    Message,
    MessageType,
    NotLeaderError,
    SnapshotStatus,
    StateType,
    UncommittedBacklogFullError,
)

from .harness import Cluster, storage_with


def test_first_election_commits_the_new_leaders_empty_entry() -> None:
    c = Cluster(3)
    c.campaign(1)
    assert c.leader() == 1
    for i in c.ids:
        node = c.nodes[i]
        assert node.term == 1
        assert node.leader_id == 1
        assert [(e.index, e.term, e.data) for e in c.applied[i]] == [(1, 1, b"")]


def test_an_election_happens_by_timeout_alone() -> None:
    c = Cluster(5, seed=3)
    for _ in range(50):
        c.tick_all()
        if c.leaders():
            break
    leader = c.leader()
    assert {c.nodes[i].leader_id for i in c.ids} == {leader}
    assert len({c.nodes[i].term for i in c.ids}) == 1


def test_candidate_with_a_stale_log_cannot_win_and_keeps_its_term() -> None:
    storages = {
        1: storage_with([(1, 1), (2, 2)], term=2),
        2: storage_with([(1, 1), (2, 2)], term=2),
        3: storage_with([(1, 1)], term=2),
    }
    c = Cluster(3, storages=storages)
    c.campaign(3)
    assert c.leaders() == []
    assert c.nodes[3].state is StateType.FOLLOWER
    # pre-vote lost: nobody's term moved, so nobody was disrupted
    assert [c.nodes[i].term for i in c.ids] == [2, 2, 2]
    c.campaign(1)
    assert c.leader() == 1


def _partitioned_node_rejoins(c: Cluster) -> None:
    c.campaign(1)
    assert c.leader() == 1
    c.isolate(3)
    for _ in range(100):
        c.tick_all()
    c.heal()
    c.tick_all(30)


def test_prevote_keeps_a_rejoining_node_from_disrupting_the_leader() -> None:
    c = Cluster(3, pre_vote=True, check_quorum=True)
    _partitioned_node_rejoins(c)
    assert c.leader() == 1
    assert [c.nodes[i].term for i in c.ids] == [1, 1, 1]
    assert c.nodes[3].leader_id == 1


def test_without_prevote_the_rejoining_node_does_disrupt() -> None:
    # The control experiment: the scenario above is not passing by accident.
    c = Cluster(3, pre_vote=False, check_quorum=False)
    _partitioned_node_rejoins(c)
    assert max(c.nodes[i].term for i in c.ids) > 1


def test_check_quorum_leader_steps_down_when_it_hears_no_majority() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(1)
    # The followers answered during the first round, so the first check passes; the next
    # one, an election timeout later, finds nobody.
    election_tick = c.configs[1].election_tick
    for _ in range(election_tick):
        c.tick(1)
    assert c.nodes[1].is_leader
    for _ in range(election_tick):
        c.tick(1)
    assert c.nodes[1].state is StateType.FOLLOWER
    assert c.nodes[1].leader_id is None
    with pytest.raises(NotLeaderError) as info:
        c.nodes[1].propose(b"x")
    assert info.value.leader_id is None
    # the majority side elects a new leader in a later term
    for _ in range(60):
        c.tick(2)
        c.tick(3)
        c.deliver()
    assert c.nodes[2].is_leader or c.nodes[3].is_leader
    assert max(c.nodes[2].term, c.nodes[3].term) > 1


def test_check_quorum_leader_stays_with_one_follower_alive() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(3)
    c.tick_all(3 * c.configs[1].election_tick)
    assert c.nodes[1].is_leader
    assert c.nodes[1].term == 1


def test_divergent_follower_log_is_repaired_with_few_round_trips() -> None:
    # Raft paper figure 7, follower (f): it has entries of terms 2 and 3 that no leader
    # ever committed; the leader's log has terms 4, 5 and 6 there.
    leader_log = [(i, t) for i, t in enumerate([1, 1, 1, 4, 4, 5, 5, 6, 6, 6], start=1)]
    follower_log = [(i, t) for i, t in enumerate([1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3], start=1)]
    storages = {
        1: storage_with(leader_log, term=6, commit=3),
        2: storage_with(follower_log, term=3, commit=3),
        3: storage_with(leader_log, term=6, commit=3),
    }
    c = Cluster(3, storages=storages)
    c.campaign(1)
    assert c.leader() == 1
    c.tick_all(3)
    assert c.log(2) == c.log(1)
    assert c.log(1)[-1] == (11, 7)
    rejections = [
        m for m in c.delivered if m.type is MessageType.APP_RESP and m.reject and m.from_id == 2
    ]
    # One rejection: its hint (term 3 at index 10) lets the leader skip terms 4-6 at once,
    # where walking back one entry per round trip would take seven.
    assert len(rejections) == 1
    assert c.nodes[2].raft.raft_log.committed == 11


def test_old_term_entry_is_not_committed_by_counting_replicas() -> None:
    # Raft §5.4.2 (figure 8): an entry from an earlier term on a majority is not committed
    # until an entry of the leader's own term is replicated on a majority too.
    storages = {
        1: storage_with([(1, 1), (2, 2)], term=2, commit=1),
        2: storage_with([(1, 1)], term=2, commit=1),
        3: storage_with([(1, 1)], term=2, commit=1),
    }
    c = Cluster(3, storages=storages)
    c.drop_filters.append(lambda m: m.type is MessageType.APP)
    c.campaign(1)
    leader = c.nodes[1]
    assert leader.is_leader and leader.term == 3
    assert c.log(1) == [(1, 1), (2, 2), (3, 3)]
    # node 2 acknowledges index 2 (the term-2 entry): a majority holds it now
    leader.step(Message(type=MessageType.APP_RESP, to=1, from_id=2, term=3, index=2))
    c.process(1)
    assert leader.status().commit == 1
    assert [e.index for e in c.applied[1]] == [1]
    # once the leader's own no-op (term 3) reaches a majority, both commit together
    leader.step(Message(type=MessageType.APP_RESP, to=1, from_id=2, term=3, index=3))
    c.process(1)
    assert leader.status().commit == 3
    assert [(e.index, e.term) for e in c.applied[1]] == [(1, 1), (2, 2), (3, 3)]


def test_lagging_follower_gets_a_snapshot_after_compaction() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(3)
    for n in range(10):
        c.propose(1, f"cmd{n}".encode())
    applied = c.nodes[1].status().applied
    assert applied == 11
    image = b"|".join(c.applied_data(1))
    c.storages[1].create_snapshot(applied, image)
    c.storages[1].compact(applied)
    c.heal()
    c.tick_all(3)
    snaps = [rd.snapshot for rd in c.readies[3] if rd.snapshot is not None]
    assert len(snaps) == 1
    assert snaps[0].metadata.index == 11 and snaps[0].data == image
    assert c.storages[3].snapshot().metadata.index == 11
    # and it keeps up with what comes after the snapshot
    c.propose(1, b"after")
    c.tick_all(2)
    assert c.log(3) == c.log(1) == [(12, 1)]
    assert c.applied_data(3) == [b"after"]


@pytest.mark.parametrize("report_failure", [False, True])
def test_a_lost_snapshot_is_sent_again(report_failure: bool) -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(3)
    for n in range(5):
        c.propose(1, f"cmd{n}".encode())
    c.storages[1].create_snapshot(6, b"img")
    c.storages[1].compact(6)
    c.heal()
    lost: list[Message] = []

    def lose_first_snapshot(m: Message) -> bool:
        if m.type is MessageType.SNAP and not lost:
            lost.append(m)
            return True
        return False

    c.drop_filters.append(lose_first_snapshot)
    c.tick_all(2)
    assert lost and c.storages[3].snapshot().is_empty
    if report_failure:
        # the transport noticed: the leader retries on the next heartbeat answer
        c.nodes[1].report_snapshot(3, SnapshotStatus.FAILURE)
        c.tick_all(3)
    else:
        # nobody noticed: the leader retries after at most two election timeouts
        c.tick_all(2 * c.configs[1].election_tick + 3)
    assert c.storages[3].snapshot().metadata.index == 6


def test_leadership_transfer_to_an_up_to_date_follower() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.nodes[1].transfer_leadership(3)
    c.process(1)
    c.deliver()
    assert c.leader() == 3
    assert c.nodes[3].term == 2
    assert c.nodes[1].leader_id == 3


def test_leadership_transfer_catches_the_target_up_and_blocks_proposals() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(3)
    c.propose(1, b"x")
    c.nodes[1].transfer_leadership(3)
    c.process(1)
    with pytest.raises(LeadershipTransferInProgressError) as info:
        c.nodes[1].propose(b"y")
    assert info.value.transferee == 3
    c.heal()
    c.tick_all(2)
    assert c.leader() == 3
    assert b"x" in c.applied_data(3)


def test_leadership_transfer_aborts_after_an_election_timeout() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.isolate(3)
    c.nodes[1].transfer_leadership(3)
    c.process(1)
    assert c.nodes[1].status().lead_transferee == 3
    c.tick_all(c.configs[1].election_tick)
    assert c.nodes[1].is_leader
    assert c.nodes[1].status().lead_transferee is None
    c.propose(1, b"accepted again")
    assert b"accepted again" in c.applied_data(2)


def test_transfer_request_on_a_follower_is_forwarded_to_the_leader() -> None:
    c = Cluster(3)
    c.campaign(1)
    c.nodes[2].transfer_leadership(2)
    c.process(2)
    c.deliver()
    assert c.leader() == 2


def test_proposal_on_a_follower_names_the_leader() -> None:
    c = Cluster(3)
    with pytest.raises(NotLeaderError) as before:
        c.nodes[2].propose(b"x")
    assert before.value.leader_id is None
    c.campaign(1)
    with pytest.raises(NotLeaderError) as after:
        c.nodes[2].propose(b"x")
    assert (after.value.node_id, after.value.leader_id, after.value.term) == (2, 1, 1)
    assert "leader is 1" in str(after.value)


def test_proposals_commit_and_apply_everywhere_in_order() -> None:
    c = Cluster(5)
    c.campaign(2)
    ids = [c.propose(2, f"p{n}".encode()) for n in range(5)]
    c.tick_all(2)
    for i in c.ids:
        assert c.applied_data(i) == [f"p{n}".encode() for n in range(5)]
    by_index = {e.index: e for e in c.applied[1]}
    assert all(by_index[pid.index].term == pid.term for pid in ids)


def test_restart_recovers_term_vote_and_committed_entries_from_storage() -> None:
    c = Cluster(3)
    c.campaign(1)
    for n in range(3):
        c.propose(1, f"p{n}".encode())
    c.tick_all(1)
    before = c.applied_data(2)
    c.crash(2)
    c.applied[2] = []
    node = c.start(2)
    assert node.term == 1 and node.raft.vote == 1
    c.process(2)
    assert c.applied_data(2) == before
    c.tick_all(3)
    assert c.nodes[2].leader_id == 1


def test_duplicated_and_reordered_messages_change_nothing() -> None:
    c = Cluster(3, seed=5)
    c.campaign(1)
    for n in range(4):
        c.propose(1, f"p{n}".encode())
    c.tick_all(2)
    logs = {i: c.log(i) for i in c.ids}
    replay = list(c.delivered)
    c.rng.shuffle(replay)
    for m in replay:
        c.send(m)
    c.deliver()
    c.tick_all(2)
    assert c.leader() == 1
    assert {i: c.log(i) for i in c.ids} == logs
    assert c.applied_data(2) == [f"p{n}".encode() for n in range(4)]


def test_leader_refuses_proposals_beyond_the_uncommitted_limit() -> None:
    c = Cluster(3)
    c.configs = {i: replace(cfg, max_uncommitted_entries=3) for i, cfg in c.configs.items()}
    for i in c.ids:
        c.start(i)
    c.campaign(1)
    c.isolate(1)  # nothing commits from here on
    for n in range(3):
        c.propose(1, f"p{n}".encode())
    with pytest.raises(UncommittedBacklogFullError) as info:
        c.nodes[1].propose(b"one too many")
    assert (info.value.uncommitted, info.value.limit) == (3, 3)
    c.heal()
    c.tick_all(2)
    c.propose(1, b"room again")
    assert b"room again" in c.applied_data(2)
