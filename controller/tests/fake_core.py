"""A ControllerCore whose Raft node commits every proposal at once and leads as the
test says: the admin API's answers, quickly, without Raft members."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig
from rocketcluster.controller.core import ControllerCore, ReplicasMachine
from rocketcluster.controller.raft.rawnode import PeerProgress


class FakeNode:
    """Commits every proposal at once; leadership is what the test sets."""

    def __init__(self, machine: ReplicasMachine) -> None:
        self.machine = machine
        self.index = 0
        self.me = 1
        self.leader_id: int | None = 1
        self.follows_transfers = True
        self.progress = {
            1: PeerProgress(10, 11, "replicate"),
            2: PeerProgress(9, 10, "replicate"),
            3: PeerProgress(10, 11, "replicate"),
        }
        self.raw = SimpleNamespace(status=lambda: SimpleNamespace(progress=self.progress))

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.me

    async def propose(self, data: bytes, wait_s: float) -> Any:
        self.index += 1
        return self.machine.apply(self.index, data)

    def transfer_leadership(self, to: int) -> None:
        if self.follows_transfers:
            self.leader_id = to


def make_core(tmp_path: Path) -> ControllerCore:
    config = ControllerProcessConfig(
        cluster="t",
        node_id=1,
        members=[
            ControllerMember(
                id=i, raft_address=f"10.0.0.{i}:9878", admin_address=f"10.0.0.{i}:8080"
            )
            for i in (1, 2, 3)
        ],
        data_dir=tmp_path,
    )
    return ControllerCore(config, FakeNode)


def node(core: ControllerCore) -> FakeNode:
    assert isinstance(core.node, FakeNode)
    return core.node


async def register(core: ControllerCore, group: str, endpoint: str = "") -> None:
    applied = await core.apply_broker_id("t", group, 1, "10.1.0.1:10911", f"{group}-1")
    assert applied.ok, applied
    registered = await core.register_broker("t", group, 1, "10.1.0.1:10911", endpoint)
    assert registered.ok, registered
