"""The RawNode contract: what a driver may rely on, and what it must not do."""

from __future__ import annotations

import random

import pytest

from rocketcluster.controller.raft import (
    Config,
    ConfigError,
    Entry,
    MemoryStorage,
    Message,
    MessageType,
    MisroutedMessageError,
    RaftInvariantError,
    RawNode,
    ReadyNotAdvancedError,
    StateType,
    StepLocalMessageError,
    StepPeerNotFoundError,
)


def node(node_id: int = 1, voters: tuple[int, ...] = (1, 2, 3)) -> tuple[RawNode, MemoryStorage]:
    storage = MemoryStorage()
    return RawNode(Config(id=node_id, voters=voters), storage, rng=random.Random(1)), storage


def drain(n: RawNode, storage: MemoryStorage) -> list[Message]:
    sent: list[Message] = []
    while n.has_ready():
        rd = n.ready()
        if rd.snapshot is not None:
            storage.apply_snapshot(rd.snapshot)
        storage.append(rd.entries)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        sent.extend(rd.messages)
        n.advance(rd)
    return sent


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": 0, "voters": (1, 2, 3)}, "id"),
        ({"id": 4, "voters": (1, 2, 3)}, "id"),
        ({"id": 1, "voters": ()}, "voters"),
        ({"id": 1, "voters": (1, 1, 2)}, "voters"),
        ({"id": 1, "voters": (1, 2, 3), "election_tick": 1, "heartbeat_tick": 1}, "election_tick"),
        ({"id": 1, "voters": (1, 2, 3), "heartbeat_tick": 0}, "heartbeat_tick"),
        ({"id": 1, "voters": (1, 2, 3), "max_inflight_msgs": 0}, "max_inflight_msgs"),
    ],
)
def test_invalid_config_is_refused_with_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        RawNode(Config(**kwargs), MemoryStorage(), rng=random.Random(0))  # type: ignore[arg-type]
    assert info.value.field == field


def test_ready_must_be_advanced_before_the_next_one() -> None:
    n, _ = node()
    n.campaign()
    rd = n.ready()
    assert not n.has_ready()
    with pytest.raises(ReadyNotAdvancedError):
        n.ready()
    other_node, _ = node()
    other_node.campaign()
    with pytest.raises(RaftInvariantError):
        n.advance(other_node.ready())
    n.advance(rd)
    with pytest.raises(RaftInvariantError):
        n.advance(rd)


def test_a_vote_is_persisted_in_the_same_ready_that_sends_it() -> None:
    n, _ = node(2)
    n.step(Message(type=MessageType.VOTE, to=2, from_id=1, term=1, index=0, log_term=0))
    rd = n.ready()
    assert rd.hard_state is not None and rd.hard_state.vote == 1 and rd.hard_state.term == 1
    assert [m.type for m in rd.messages] == [MessageType.VOTE_RESP]
    assert not rd.messages[0].reject
    assert rd.must_sync
    n.advance(rd)


def test_a_commit_only_change_needs_no_fsync() -> None:
    n, storage = node(2)
    n.step(
        Message(
            type=MessageType.APP,
            to=2,
            from_id=1,
            term=1,
            entries=(Entry(1, 1, b"a"),),
        )
    )
    drain(n, storage)
    n.step(Message(type=MessageType.HEARTBEAT, to=2, from_id=1, term=1, commit=1))
    rd = n.ready()
    assert rd.hard_state is not None and rd.hard_state.commit == 1
    assert not rd.entries and not rd.must_sync
    assert [e.data for e in rd.committed_entries] == [b"a"]
    n.advance(rd)


def test_refuses_local_misrouted_and_unknown_peer_messages() -> None:
    n, _ = node(1)
    with pytest.raises(StepLocalMessageError):
        n.step(Message(type=MessageType.HUP, to=1, from_id=2, term=1))
    with pytest.raises(StepLocalMessageError):
        n.step(Message(type=MessageType.APP, to=1, from_id=2, term=0))
    with pytest.raises(MisroutedMessageError):
        n.step(Message(type=MessageType.HEARTBEAT, to=2, from_id=3, term=1))
    with pytest.raises(StepPeerNotFoundError):
        n.step(Message(type=MessageType.APP_RESP, to=1, from_id=9, term=1))
    with pytest.raises(StepPeerNotFoundError):
        n.transfer_leadership(9)


def test_single_member_commits_in_the_same_ready_it_persists() -> None:
    n, storage = node(1, voters=(1,))
    n.campaign()
    assert n.state is StateType.LEADER
    drain(n, storage)
    pid = n.propose(b"solo")
    rd = n.ready()
    assert [e.data for e in rd.entries] == [b"solo"]
    assert [(e.term, e.index, e.data) for e in rd.committed_entries] == [
        (pid.term, pid.index, b"solo")
    ]
    n.advance(rd)
    assert n.status().applied == pid.index


def test_log_may_change_between_ready_and_advance() -> None:
    # An async driver keeps stepping while a Ready is being written: an entry replaced
    # meanwhile must stay unstable and be handed out again.
    n, storage = node(2)
    n.step(
        Message(
            type=MessageType.APP,
            to=2,
            from_id=1,
            term=1,
            entries=(Entry(1, 1, b"a"), Entry(1, 2, b"b")),
        )
    )
    rd = n.ready()
    assert [e.index for e in rd.entries] == [1, 2]
    n.step(
        Message(
            type=MessageType.APP,
            to=2,
            from_id=3,
            term=2,
            index=1,
            log_term=1,
            entries=(Entry(2, 2, b"B"),),
        )
    )
    storage.append(rd.entries)
    n.advance(rd)
    rd2 = n.ready()
    assert (rd2.entries[-1].index, rd2.entries[-1].term, rd2.entries[-1].data) == (2, 2, b"B")
    storage.append(rd2.entries)
    n.advance(rd2)
    assert [(e.index, e.term) for e in storage.all_entries()] == [(1, 1), (2, 2)]


def test_status_reports_progress_on_the_leader_only() -> None:
    n, storage = node(1)
    assert n.status().progress == {}
    n.campaign()
    drain(n, storage)
    for peer in (2, 3):
        n.step(Message(type=MessageType.PRE_VOTE_RESP, to=1, from_id=peer, term=1))
    drain(n, storage)
    n.step(Message(type=MessageType.VOTE_RESP, to=1, from_id=2, term=1))
    drain(n, storage)
    status = n.status()
    assert status.state is StateType.LEADER and status.leader_id == 1
    assert set(status.progress) == {1, 2, 3}
    assert status.progress[1].match == 1
