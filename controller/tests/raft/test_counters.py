"""Elections counted by the protocol core (the controller's
rocketmq_controller_raft_elections_total): a member counts the elections it starts as a
candidate; pre-votes are polls that change no term and are not counted."""

from __future__ import annotations

from .harness import Cluster


def elections(c: Cluster) -> dict[int, int]:
    return {i: c.nodes[i].status().elections_started for i in c.ids}


def test_a_won_election_is_counted_once_by_its_candidate_only() -> None:
    c = Cluster(3, pre_vote=True)
    c.campaign(1)
    assert c.leader() == 1
    assert elections(c) == {1: 1, 2: 0, 3: 0}


def test_failed_pre_votes_are_not_elections() -> None:
    c = Cluster(3, pre_vote=True)
    c.campaign(1)
    c.isolate(3)
    c.tick(3, 10 * c.configs[3].election_tick)  # many timeouts, every pre-vote unheard
    assert c.nodes[3].term == 1
    assert elections(c)[3] == 0


def test_without_pre_vote_every_timeout_is_an_election() -> None:
    c = Cluster(3, pre_vote=False, check_quorum=False)
    c.campaign(1)
    c.isolate(3)
    c.tick(3, 10 * c.configs[3].election_tick)
    assert c.nodes[3].term > 2
    assert elections(c)[3] == c.nodes[3].term - 1  # every term after the first is one
