"""Phase 0 of a switchover: the controller deposes an alive master only after it
answered that the designated slave holds its whole log; otherwise the switchover is
refused and nothing changes (same master, same master epoch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig
from rocketcluster.controller.core import ControllerCore, ReplicasMachine
from rocketcluster.controller.election import BrokerLiveInfo
from rocketcluster.controller.handover import HandoverAnswer, handover_refusal
from rocketcluster.controller.state import ControllerCode, Result

GROUP = "g"


class FakeNode:
    """A leader that commits every proposal at once (the Raft part is tested elsewhere)."""

    is_leader = True
    leader_id = 1

    def __init__(self, machine: ReplicasMachine) -> None:
        self.machine = machine
        self.index = 0
        self.commands: list[dict[str, Any]] = []

    async def propose(self, data: bytes, wait_s: float = 5.0) -> Result:
        self.index += 1
        self.commands.append(json.loads(data)["cmd"])
        return self.machine.apply(self.index, data)


class FakeHandover:
    def __init__(self, answer: HandoverAnswer) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, int]] = []
        self.aborted = 0

    async def prepare(
        self, address: str, group: str, master_epoch: int, target: int
    ) -> HandoverAnswer:
        self.asked.append((address, master_epoch, target))
        return self.answer

    async def abort(self, address: str, group: str, master_epoch: int, target: int) -> None:
        self.aborted += 1


def _core(tmp_path: Path, answer: HandoverAnswer) -> tuple[ControllerCore, FakeNode, FakeHandover]:
    config = ControllerProcessConfig(
        cluster="c",
        node_id=1,
        members=[ControllerMember(id=1, raft_address="127.0.0.1:1", admin_address="127.0.0.1:2")],
        data_dir=tmp_path,
        write_quorum=2,
    )
    nodes: list[FakeNode] = []

    def factory(machine: ReplicasMachine) -> FakeNode:
        nodes.append(FakeNode(machine))
        return nodes[0]

    core = ControllerCore(config, factory)
    handover = FakeHandover(answer)
    core.handover = handover
    return core, nodes[0], handover


async def _group_with_master_1(core: ControllerCore, node: FakeNode) -> None:
    """Brokers 1, 2, 3 registered, 1 master, all in sync; every broker reports it acted
    on any view (fenced at once) and holds the same log."""
    for b in (1, 2, 3):
        await node.propose(
            _cmd(
                type="ApplyBrokerId",
                cluster="c",
                group=GROUP,
                brokerId=b,
                address=f"10.0.0.{b}:8081|10.0.0.{b}:10912",
                checkCode=f"code-{b}",
            ),
            1,
        )
    await node.propose(_cmd(type="ElectMaster", group=GROUP, masterEpoch=0, newMaster=1), 1)
    g = core.state.groups[GROUP]
    await node.propose(
        _cmd(
            type="AlterSyncStateSet",
            group=GROUP,
            masterId=1,
            masterEpoch=g.master_epoch,
            syncStateSetEpoch=g.sync_state_set_epoch,
            syncStateSet=[1, 2, 3],
        ),
        1,
    )
    for b in (1, 2, 3):
        info = BrokerLiveInfo(b, epoch=1, max_offset=4096, seen_master_epoch=99)
        core.liveness.heartbeat(GROUP, info, "", 3000)
    node.commands.clear()


def _cmd(**command: Any) -> bytes:
    return json.dumps({"cmd": command, "time": 0}).encode()


async def test_a_slave_that_did_not_catch_up_is_refused_and_nobody_is_deposed(
    tmp_path: Path,
) -> None:
    behind = HandoverAnswer(True, False, max_offset=20_480, target_ack_offset=8192, waited_ms=5000)
    core, node, handover = _core(tmp_path, behind)
    await _group_with_master_1(core, node)
    before = core.state.groups[GROUP].view()
    reply = await core.elect_master(GROUP, 3, True, "admin request")
    assert reply.code is ControllerCode.CONTROLLER_ELECT_MASTER_FAILED
    assert "broker 3 is 12 KB behind after 5.0 s" in reply.message, reply.message
    assert handover.asked == [("10.0.0.1:10912", before["masterEpoch"], 3)]
    assert node.commands == []  # phase 1 never ran: no ElectMaster, no new epoch
    assert core.state.groups[GROUP].view() == before


async def test_an_alive_master_that_cannot_be_asked_stays_master(tmp_path: Path) -> None:
    silent = HandoverAnswer(False, error="DEADLINE_EXCEEDED: Deadline Exceeded")
    core, node, _ = _core(tmp_path, silent)
    await _group_with_master_1(core, node)
    reply = await core.elect_master(GROUP, 2, True, "admin request")
    assert reply.code is ControllerCode.CONTROLLER_ELECT_MASTER_FAILED
    assert "did not answer" in reply.message
    assert node.commands == []
    assert core.state.groups[GROUP].master_id == 1


async def test_a_caught_up_slave_is_elected_after_the_fencing(tmp_path: Path) -> None:
    caught_up = HandoverAnswer(True, True, max_offset=4096, target_ack_offset=4096)
    core, node, handover = _core(tmp_path, caught_up)
    await _group_with_master_1(core, node)
    epoch = core.state.groups[GROUP].master_epoch
    reply = await core.elect_master(GROUP, 3, True, "admin request")
    assert reply.ok, reply
    g = core.state.groups[GROUP]
    assert g.master_id == 3 and g.master_epoch == epoch + 2
    assert [c["newMaster"] for c in node.commands] == [None, 3]  # deposed, then elected
    assert handover.aborted == 0


async def test_a_dead_master_is_not_asked(tmp_path: Path) -> None:
    core, node, handover = _core(tmp_path, HandoverAnswer(False, error="unreachable"))
    await _group_with_master_1(core, node)
    core.liveness.channel_opened(GROUP, 1)
    core.liveness.channel_closed(GROUP, 1)  # its channel broke: dead at once
    reply = await core.elect_master(GROUP, 2, True, "admin request")
    assert reply.ok, reply
    assert handover.asked == []  # a failover's fenced election, as before
    assert core.state.groups[GROUP].master_id == 2


def test_phase_zero_decision() -> None:
    assert handover_refusal(HandoverAnswer(True, True, 10, 10), 1, 2) == ""
    # A broker from before PrepareHandover: the fenced election decides, as before.
    assert handover_refusal(HandoverAnswer(False, unimplemented=True), 1, 2) == ""
    refused = handover_refusal(HandoverAnswer(True, refused="broker 1 is not the master"), 1, 2)
    assert "refused the handover: broker 1 is not the master" in refused
    behind = HandoverAnswer(True, False, 3 << 20, 1 << 20, 5000)
    assert "broker 2 is 2.0 MB behind after 5.0 s" in handover_refusal(behind, 1, 2)
    assert "master 1 stays master" in handover_refusal(behind, 1, 2)
    # the master is asked on the HA endpoint it registered
    assert split_registered("10.0.0.1:8081|10.0.0.1:10912")[1] == "10.0.0.1:10912"
    assert split_registered("10.0.0.1:10912")[1] == "10.0.0.1:10912"
