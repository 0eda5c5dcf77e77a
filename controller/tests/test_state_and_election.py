"""Every election and validation rule of the controller's state machine."""

from __future__ import annotations

from typing import Any

import pytest

from rocketcluster.controller.election import BrokerLiveInfo, decide, designated_lacks, fenced
from rocketcluster.controller.state import ControllerCode, ReplicasState


class Cluster:
    def __init__(self) -> None:
        self.state = ReplicasState()
        self.index = 0

    def do(self, **command: Any) -> Any:
        self.index += 1
        return self.state.apply(self.index, command, time_ms=1000 + self.index)

    def group(self) -> Any:
        return self.state.groups["g"]


def three_brokers() -> Cluster:
    c = Cluster()
    for b in (1, 2, 3):
        r = c.do(
            type="ApplyBrokerId",
            cluster="c",
            group="g",
            brokerId=b,
            address=f"10.0.0.{b}:10911",
            checkCode=f"code-{b}",
        )
        assert r.ok, r
    return c


def test_broker_ids_are_applied_in_order_and_retries_are_idempotent() -> None:
    c = three_brokers()
    again = c.do(type="ApplyBrokerId", group="g", brokerId=2, address="x", checkCode="code-2")
    assert again.ok and again.data["brokerId"] == 2
    taken = c.do(type="ApplyBrokerId", group="g", brokerId=2, address="x", checkCode="someone-else")
    assert taken.code is ControllerCode.CONTROLLER_BROKER_ID_INVALID
    gap = c.do(type="ApplyBrokerId", group="g", brokerId=9, address="x", checkCode="new")
    assert gap.code is ControllerCode.CONTROLLER_BROKER_ID_INVALID
    unknown = c.do(type="RegisterBroker", group="g", brokerId=7, address="x")
    assert unknown.code is ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert c.do(type="RegisterBroker", group="g", brokerId=3, address="10.0.0.33:1").ok
    assert c.group().replicas[3].address == "10.0.0.33:1"


def test_first_election_makes_a_set_of_the_master_and_raises_both_epochs() -> None:
    c = three_brokers()
    g = c.group()
    alive = {b: BrokerLiveInfo(b) for b in (1, 2, 3)}
    decision = decide(g, alive)  # never had a master: every alive replica may win
    assert decision.new_master == 1 and not decision.unclean
    r = c.do(type="ElectMaster", group="g", masterEpoch=0, newMaster=decision.new_master)
    assert r.ok and g.master_id == 1 and g.master_epoch == 1
    assert g.sync_state_set == [1] and g.sync_state_set_epoch == 1


def elected(c: Cluster, master: int = 1, members: tuple[int, ...] = (1, 2, 3)) -> Cluster:
    c.do(type="ElectMaster", group="g", masterEpoch=c.group().master_epoch, newMaster=master)
    g = c.group()
    r = c.do(
        type="AlterSyncStateSet",
        group="g",
        masterId=master,
        masterEpoch=g.master_epoch,
        syncStateSetEpoch=g.sync_state_set_epoch,
        syncStateSet=list(members),
    )
    assert r.ok, r
    return c


def test_highest_epoch_wins_then_offset_then_priority_then_id() -> None:
    g = elected(three_brokers()).group()
    g.master_id = None  # the master died

    def pick(**infos: tuple[int, int, int]) -> int | None:
        return decide(g, infos_by_id(infos)).new_master

    assert pick(b2=(3, 10, 0), b3=(4, 1, 0)) == 3  # epoch first
    assert pick(b2=(4, 10, 0), b3=(4, 20, 0)) == 3  # then max offset
    assert pick(b2=(4, 20, 1), b3=(4, 20, 0)) == 3  # then priority (lower wins)
    assert pick(b2=(4, 20, 0), b3=(4, 20, 0)) == 2  # then the lower id


def infos_by_id(infos: dict[str, tuple[int, int, int]]) -> dict[int, BrokerLiveInfo]:
    return {
        int(k[1:]): BrokerLiveInfo(int(k[1:]), epoch=e, max_offset=o, priority=p)
        for k, (e, o, p) in infos.items()
    }


def test_dead_candidates_are_skipped_and_an_alive_master_stays() -> None:
    g = elected(three_brokers(), members=(1, 2)).group()
    alive = {1: BrokerLiveInfo(1), 3: BrokerLiveInfo(3, epoch=9, max_offset=999)}
    assert decide(g, alive).code is ControllerCode.CONTROLLER_MASTER_STILL_EXIST
    del alive[1]  # the master dies; 2 is in sync but dead, 3 is alive but not in sync
    decision = decide(g, alive)
    assert (
        decision.code is ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
        and decision.new_master is None
    )
    unclean = decide(g, alive, unclean_enabled=True)
    assert unclean.new_master == 3 and unclean.unclean


def test_a_lone_in_sync_survivor_is_not_elected_when_writes_need_two_acks() -> None:
    """Writes acknowledged by 2 of the set {1, 2, 3}: with 1 (the master) and 2 dead,
    3 alone may lack writes 1 and 2 acknowledged — electing it loses them (found by
    the chaos suite). With 2 alive, one of them holds every acknowledged write."""
    g = elected(three_brokers()).group()
    lone = {3: BrokerLiveInfo(3, epoch=1, max_offset=100)}
    refused = decide(g, lone, write_quorum=2)
    assert refused.code is ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert refused.new_master is None and "2 must be alive" in refused.reason
    assert decide(g, lone).new_master == 3  # without the quorum rule (async, all-ack)
    unclean = decide(g, lone, write_quorum=2, unclean_enabled=True)
    assert unclean.new_master == 3 and unclean.unclean and "unclean" in unclean.reason
    back = {**lone, 2: BrokerLiveInfo(2, epoch=1, max_offset=180)}  # 2 restarted
    decision = decide(g, back, write_quorum=2)
    assert decision.new_master == 2 and not decision.unclean  # the newest of the two
    # Once the set shrank to {1, 2} every write needed both: 2 alone is enough.
    g2 = elected(three_brokers(), members=(1, 2)).group()
    assert decide(g2, {2: BrokerLiveInfo(2)}, write_quorum=2).new_master == 2
    # All-ack (or a quorum as large as the set): any alive member holds everything.
    assert decide(g, lone, write_quorum=3).new_master == 3


def test_no_winner_keeps_the_set_and_bumps_the_master_epoch() -> None:
    c = elected(three_brokers())
    g = c.group()
    before_set, before_epoch, set_epoch = (
        list(g.sync_state_set),
        g.master_epoch,
        g.sync_state_set_epoch,
    )
    r = c.do(
        type="ElectMaster",
        group="g",
        masterEpoch=before_epoch,
        newMaster=None,
        reason="master died",
    )
    assert r.code is ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert g.master_id is None and g.master_epoch == before_epoch + 1
    assert g.sync_state_set == before_set and g.sync_state_set_epoch == set_epoch
    assert (
        c.state.history[-1]["command"] == "ElectMaster"
        and c.state.history[-1]["reason"] == "master died"
    )


def test_designated_switchover_rules() -> None:
    g = elected(three_brokers(), members=(1, 2)).group()
    alive = {b: BrokerLiveInfo(b) for b in (1, 2, 3)}
    assert decide(g, alive, designated=2).new_master == 2
    assert decide(g, alive, designated=3).code is ControllerCode.CONTROLLER_ELECT_MASTER_FAILED
    assert decide(g, alive, designated=1).code is ControllerCode.CONTROLLER_MASTER_STILL_EXIST
    del alive[2]
    assert decide(g, alive, designated=2).code is ControllerCode.CONTROLLER_BROKER_NOT_ALIVE
    assert decide(g, alive, designated=8).code is ControllerCode.CONTROLLER_ELECT_MASTER_FAILED


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"masterEpoch": 0}, ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH),
        ({"syncStateSetEpoch": 0}, ControllerCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        ({"masterId": 2}, ControllerCode.CONTROLLER_INVALID_MASTER),
        ({"syncStateSet": [1, 5]}, ControllerCode.CONTROLLER_INVALID_REPLICAS),
        ({"syncStateSet": [2, 3]}, ControllerCode.CONTROLLER_INVALID_REPLICAS),
        ({"notAlive": [3]}, ControllerCode.CONTROLLER_BROKER_NOT_ALIVE),
        ({"group": "nope"}, ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED),
    ],
)
def test_alter_sync_state_set_fencing(change: dict[str, Any], code: ControllerCode) -> None:
    c = elected(three_brokers(), members=(1, 2))
    g = c.group()
    command = {
        "type": "AlterSyncStateSet",
        "group": "g",
        "masterId": 1,
        "masterEpoch": g.master_epoch,
        "syncStateSetEpoch": g.sync_state_set_epoch,
        "syncStateSet": [1, 2, 3],
        **change,
    }
    before = (list(g.sync_state_set), g.sync_state_set_epoch)
    assert c.do(**command).code is code
    assert (g.sync_state_set, g.sync_state_set_epoch) == before  # a refused change changes nothing


def test_stale_election_is_fenced() -> None:
    c = elected(three_brokers())
    r = c.do(type="ElectMaster", group="g", masterEpoch=0, newMaster=2)
    assert r.code is ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH and c.group().master_id == 1


def test_snapshot_round_trip_and_history() -> None:
    c = elected(three_brokers())
    c.do(type="PutRoute", topic="orders", queues=8, groups=["g"])
    restored = ReplicasState.restore(c.state.snapshot())
    assert restored.groups["g"].view() == c.group().view()
    assert restored.routes == c.state.routes and restored.history == c.state.history
    assert [e["command"] for e in restored.events_since(0, "g")][:3] == ["ApplyBrokerId"] * 3
    assert c.do(type="Bogus").code is ControllerCode.CONTROLLER_INVALID_REQUEST


def test_only_brokers_that_acted_on_the_deposing_view_are_candidates() -> None:
    """Found by the soak: master 1, cut off from the controllers, went on acknowledging
    writes with slave 2 while slave 3 — newest by the offsets of a moment earlier —
    was elected; 2 then cut those writes. Now the master is first deposed (a new
    master epoch), and only replicas that report that epoch — they stopped
    replicating from 1, their offsets are final — may be compared and elected."""
    g = elected(three_brokers()).group()
    deposed_epoch = g.master_epoch + 1
    alive = {
        2: BrokerLiveInfo(2, epoch=1, max_offset=180, seen_master_epoch=g.master_epoch),
        3: BrokerLiveInfo(3, epoch=1, max_offset=150, seen_master_epoch=deposed_epoch),
    }
    ready = fenced(alive, deposed_epoch)
    assert set(ready) == {3}  # 2 may still be taking writes from the old master
    # With writes acknowledged by 2 of 3, 3 alone is not enough to be sure.
    assert decide(g, ready, write_quorum=2).new_master is None
    alive[2] = BrokerLiveInfo(2, epoch=1, max_offset=260, seen_master_epoch=deposed_epoch)
    ready = fenced(alive, deposed_epoch)
    assert set(ready) == {2, 3}
    assert decide(g, ready, write_quorum=2).new_master == 2  # its final offset is newest


def test_a_switchover_needs_everything_the_other_fenced_slaves_hold() -> None:
    """Writes are acknowledged by 2 of 3: after master 1 is deposed, slave 3 may hold
    acknowledged writes that slave 2 lacks. Designating 2 must then be refused (the
    controller elects as a failover would); the old master's own tail never counts:
    no slave has it, so in sync mode it was never acknowledged."""
    g = elected(three_brokers()).group()
    ready = {
        1: BrokerLiveInfo(1, epoch=1, max_offset=900),
        2: BrokerLiveInfo(2, epoch=1, max_offset=700),
        3: BrokerLiveInfo(3, epoch=1, max_offset=760),
    }
    why = designated_lacks(g, ready, 2, deposed=1)
    assert "broker 3" in why and "760" in why
    assert designated_lacks(g, ready, 3, deposed=1) == ""  # 3 holds what 2 holds
    ready[2] = BrokerLiveInfo(2, epoch=1, max_offset=760)
    assert designated_lacks(g, ready, 2, deposed=1) == ""
    del ready[2]  # did not report after the fencing: its offset is not final
    assert "did not report" in designated_lacks(g, ready, 2, deposed=1)
    # A newer epoch outranks a longer log.
    ready = {2: BrokerLiveInfo(2, epoch=1, max_offset=999), 3: BrokerLiveInfo(3, epoch=2)}
    assert "broker 3" in designated_lacks(g, ready, 2, deposed=1)
