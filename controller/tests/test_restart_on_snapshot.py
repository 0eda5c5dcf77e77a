"""A controller restarted on a Raft snapshot that holds broker groups: the node
restores the snapshot while the core is being built (found by the chaos soak — every
restart after the first snapshot crashed with "'ControllerCore' object has no
attribute '_watchers'", so a killed controller majority never came back)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rocketcluster.controller.core import ControllerCore, ReplicasMachine
from rocketcluster.controller.raft.disk import DiskStorage
from rocketcluster.controller.raft.node import NodeOptions, RaftNode
from rocketcluster.controller.raft.types import Snapshot, SnapshotMetadata
from rocketcluster.controller.state import ReplicasState
from rocketcluster.ctl.testing import three_controller_members


def _state_with_a_group() -> bytes:
    state = ReplicasState()
    for index, broker in enumerate((1, 2, 3), start=1):
        result = state.apply(
            index,
            {
                "type": "ApplyBrokerId",
                "cluster": "t",
                "group": "g",
                "brokerId": broker,
                "address": f"10.0.0.{broker}:10911",
                "checkCode": f"code-{broker}",
            },
            1000 + index,
        )
        assert result.ok, result
    return state.snapshot()


def test_a_core_built_on_a_snapshot_with_groups_starts_and_serves_them(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path / "raft")
    storage.apply_snapshot(Snapshot(SnapshotMetadata(index=3, term=1), _state_with_a_group()))
    storage.close()

    def node(machine: ReplicasMachine) -> RaftNode:
        # As the controller process builds it: the storage reopened from disk.
        return RaftNode(1, (1, 2, 3), DiskStorage(tmp_path / "raft"), machine, NodeOptions())

    async def build() -> ControllerCore:
        return ControllerCore(three_controller_members(tmp_path), node)

    core = asyncio.run(build())
    assert set(core.state.groups) == {"g"}
    assert sorted(core.state.groups["g"].replicas) == [1, 2, 3]
    core.node.storage.close()
