"""The controller's Raft metrics on real members: leader changes as each member sees
them (to none included), elections started, whether a leader is known, and how the
admin API exposes them. RaftNodes run with disk storage and their own loops and
tickers, wired by an in-memory transport the test can cut; the exposition is a
ControllerCore's admin app. The protocol's own counts: raft/test_counters.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig
from rocketcluster.controller.admin import create_controller_app
from rocketcluster.controller.core import ControllerCore
from rocketcluster.controller.raft.disk import DiskStorage
from rocketcluster.controller.raft.node import NodeOptions, RaftNode
from rocketcluster.controller.raft.types import Message, SoftState

WAIT_S = 30.0  # generous: the machine is shared


# -- real members ----------------------------------------------------------------------


class Router:
    """Delivers each member's messages to the addressed member, unless cut off."""

    def __init__(self) -> None:
        self.nodes: dict[int, RaftNode] = {}
        self.isolated: set[int] = set()

    def transport(self, sender: int) -> Any:
        router = self

        class _Transport:
            def send(self, messages: tuple[Message, ...]) -> None:
                for m in messages:
                    if sender in router.isolated or m.to in router.isolated:
                        continue
                    target = router.nodes.get(m.to)
                    if target is not None:
                        target.step(m)

        return _Transport()


async def until(probe: Callable[[], bool], what: str) -> None:
    """Poll ``probe`` (the members' loops run meanwhile) for up to WAIT_S."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not probe():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@dataclass
class Member:
    node: RaftNode
    seen: list[int | None] = field(default_factory=lambda: [None])  # leaders, in order

    def saw(self, soft: SoftState) -> None:
        if soft.leader_id != self.seen[-1]:
            self.seen.append(soft.leader_id)


@pytest.fixture
async def members(tmp_path: Path) -> AsyncIterator[tuple[Router, dict[int, Member]]]:
    router = Router()
    voters = (1, 2, 3)
    # Election timeouts of 0.5-1 s: a busy shared machine stalling the loop for a
    # moment must not look like a dead leader.
    options = NodeOptions(tick_ms=10, election_tick=50)
    members = {
        i: Member(RaftNode(i, voters, DiskStorage(tmp_path / f"m{i}"), _NoMachine(), options))
        for i in voters
    }
    router.nodes = {i: m.node for i, m in members.items()}
    for i, member in members.items():
        member.node.on_soft_state.append(member.saw)
        member.node.start(router.transport(i))
    try:
        yield router, members
    finally:
        for member in members.values():
            await member.node.stop()


class _NoMachine:
    def apply(self, index: int, data: bytes) -> Any:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        return None


async def test_members_count_leader_changes_including_to_none(
    members: tuple[Router, dict[int, Member]],
) -> None:
    router, by_id = members
    nodes = {i: m.node for i, m in by_id.items()}

    def announced(member: Member) -> bool:
        """The member's soft-state callback has told of the leader its Raft state
        holds: ``leader_id`` changes on the step, the callback (and the count) on
        the node's next Ready, a moment later."""
        return member.seen[-1] == member.node.leader_id

    def one_leader() -> bool:
        leaders = {n.leader_id for n in nodes.values()}
        return len(leaders) == 1 and None not in leaders and all(map(announced, by_id.values()))

    await until(one_leader, "a leader every member knows and has announced")
    first = nodes[1].leader_id
    assert first is not None
    for member in by_id.values():
        assert member.seen[-1] == first
        assert member.node.leader_changes == len(member.seen) - 1 >= 1
    assert sum(n.status()["electionsStarted"] for n in nodes.values()) >= 1

    old = nodes[first]
    term, elections_of_old = old.status()["term"], old.status()["electionsStarted"]
    router.isolated.add(first)
    others = [m for i, m in by_id.items() if i != first]
    await until(
        lambda: old.leader_id is None and announced(by_id[first]),
        "the cut-off leader stepping down",
    )
    await until(
        lambda: all(m.node.leader_id not in (None, first) and announced(m) for m in others),
        "a new leader elected",
    )
    await until(lambda: old.raw.state.value == "pre-candidate", "the cut-off member polling")
    # Every change each member saw, to another member or to none, counted once.
    assert by_id[first].seen[-2:] == [first, None]
    for member in by_id.values():
        assert member.node.leader_changes == len(member.seen) - 1
    for member in others:
        assert member.seen[-1] not in (None, first)
    # Cut off, it only polls (pre-vote): no election, no new term.
    assert (old.status()["term"], old.status()["electionsStarted"]) == (term, elections_of_old)


# -- the admin exposition ------------------------------------------------------------------


def _config(tmp_path: Path) -> ControllerProcessConfig:
    return ControllerProcessConfig(
        cluster="t",
        node_id=1,
        members=[ControllerMember(id=1, raft_address="127.0.0.1:1", admin_address="127.0.0.1:2")],
        data_dir=tmp_path,
    )


async def test_the_admin_api_exposes_the_raft_counters(tmp_path: Path) -> None:
    options = NodeOptions(tick_ms=10, election_tick=10)

    def node(machine: Any) -> RaftNode:
        return RaftNode(1, (1,), DiskStorage(tmp_path / "raft"), machine, options, seed=1)

    core = ControllerCore(_config(tmp_path), node)
    transport = httpx.ASGITransport(app=create_controller_app(core))
    client = httpx.AsyncClient(transport=transport, base_url="http://controller")

    async def scrape() -> dict[str, tuple[str, float]]:
        text = (await client.get("/metrics")).text
        return {
            s.name: (f.type, s.value)
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name.startswith("rocketmq_controller_")
        }

    before = await scrape()
    assert before["rocketmq_controller_has_leader"] == ("gauge", 0.0)
    assert before["rocketmq_controller_raft_elections_total"] == ("counter", 0.0)
    assert before["rocketmq_controller_raft_leader_changes_total"] == ("counter", 0.0)
    core.node.start(Router().transport(1))
    try:
        await until(lambda: core.node.is_leader, "the single member leading")
        await until(lambda: core.node.leader_changes == 1, "the change reported")
        after = await scrape()
        assert after["rocketmq_controller_has_leader"] == ("gauge", 1.0)
        assert after["rocketmq_controller_raft_elections_total"] == ("counter", 1.0)
        assert after["rocketmq_controller_raft_leader_changes_total"] == ("counter", 1.0)
    finally:
        await client.aclose()
        await core.node.stop()
