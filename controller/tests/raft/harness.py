"""A hand-driven cluster for scenario tests: the test decides when messages move.

Each node's `Ready` is processed right after every input (persist to its MemoryStorage,
queue messages, apply committed entries, advance), so tests reason only about message
delivery, which they control with `deliver`, `drop` filters and link cuts.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace

from rocketcluster.controller.raft import (
    Config,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    ProposalId,
    RawNode,
    Ready,
    StateType,
)

MessageFilter = Callable[[Message], bool]


class Cluster:
    def __init__(
        self,
        size: int = 3,
        *,
        pre_vote: bool = True,
        check_quorum: bool = True,
        election_tick: int = 10,
        heartbeat_tick: int = 1,
        max_size_per_msg: int | None = None,
        storages: dict[int, MemoryStorage] | None = None,
        seed: int = 0,
    ) -> None:
        self.ids = tuple(range(1, size + 1))
        self.rng = random.Random(seed)
        self.storages = storages or {}
        for i in self.ids:
            self.storages.setdefault(i, MemoryStorage())
        self.configs = {
            i: Config(
                id=i,
                voters=self.ids,
                election_tick=election_tick,
                heartbeat_tick=heartbeat_tick,
                pre_vote=pre_vote,
                check_quorum=check_quorum,
                max_size_per_msg=max_size_per_msg,
            )
            for i in self.ids
        }
        self.nodes: dict[int, RawNode] = {}
        self.applied: dict[int, list[Entry]] = {i: [] for i in self.ids}
        self.readies: dict[int, list[Ready]] = {i: [] for i in self.ids}
        self.queue: list[Message] = []
        self.cut_links: set[tuple[int, int]] = set()
        self.drop_filters: list[MessageFilter] = []
        self.delivered: list[Message] = []
        for i in self.ids:
            self.start(i)

    # --- lifecycle --------------------------------------------------------------------

    def start(self, i: int) -> RawNode:
        snapshot = self.storages[i].snapshot()
        config = replace(self.configs[i], applied=snapshot.metadata.index)
        node = RawNode(config, self.storages[i], rng=random.Random(self.rng.getrandbits(32)))
        self.nodes[i] = node
        return node

    def crash(self, i: int) -> None:
        """Lose everything not in storage (and messages addressed to the node)."""
        del self.nodes[i]
        self.queue = [m for m in self.queue if m.to != i]

    # --- driving ----------------------------------------------------------------------

    def process(self, i: int) -> None:
        node = self.nodes.get(i)
        while node is not None and node.has_ready():
            rd = node.ready()
            self.readies[i].append(rd)
            storage = self.storages[i]
            if rd.snapshot is not None:
                storage.apply_snapshot(rd.snapshot)
            storage.append(rd.entries)
            if rd.hard_state is not None:
                storage.set_hard_state(rd.hard_state)
            self.queue.extend(rd.messages)
            self.applied[i].extend(rd.committed_entries)
            node.advance(rd)

    def process_all(self) -> None:
        for i in list(self.nodes):
            self.process(i)

    def tick(self, i: int, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[i].tick()
            self.process(i)

    def tick_all(self, n: int = 1, *, deliver: bool = True) -> None:
        for _ in range(n):
            for i in list(self.nodes):
                self.tick(i)
            if deliver:
                self.deliver()

    def take(self, kind: MessageType | None = None) -> list[Message]:
        """Remove queued messages (of one kind) without delivering them."""
        taken = [m for m in self.queue if kind is None or m.type is kind]
        self.queue = [m for m in self.queue if not (kind is None or m.type is kind)]
        return taken

    def blocked(self, m: Message) -> bool:
        if (m.from_id, m.to) in self.cut_links or m.to not in self.nodes:
            return True
        return any(f(m) for f in self.drop_filters)

    def deliver(self, max_rounds: int = 200) -> None:
        """Deliver queued messages (and what they cause) until the network is quiet."""
        for _ in range(max_rounds):
            if not self.queue:
                return
            batch, self.queue = self.queue, []
            for m in batch:
                self.send(m)

    def send(self, m: Message) -> None:
        """Deliver one message now (unless its link is cut or filtered)."""
        if self.blocked(m):
            return
        self.delivered.append(m)
        self.nodes[m.to].step(m)
        self.process(m.to)

    def campaign(self, i: int) -> None:
        self.nodes[i].campaign()
        self.process(i)
        self.deliver()

    def propose(self, i: int, data: bytes) -> ProposalId:
        pid = self.nodes[i].propose(data)
        self.process(i)
        self.deliver()
        return pid

    # --- partitions -------------------------------------------------------------------

    def isolate(self, i: int) -> None:
        for j in self.ids:
            if j != i:
                self.cut_links.add((i, j))
                self.cut_links.add((j, i))

    def cut(self, a: int, b: int) -> None:
        self.cut_links.add((a, b))
        self.cut_links.add((b, a))

    def heal(self) -> None:
        self.cut_links.clear()
        self.drop_filters.clear()

    # --- views ------------------------------------------------------------------------

    def leaders(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.state is StateType.LEADER]

    def leader(self) -> int:
        leaders = self.leaders()
        if len(leaders) != 1:
            raise AssertionError(f"expected one leader, got {leaders}")
        return leaders[0]

    def applied_data(self, i: int) -> list[bytes]:
        return [e.data for e in self.applied[i] if e.data]

    def log(self, i: int) -> list[tuple[int, int]]:
        """(index, term) of every entry of node i's in-memory log after its snapshot."""
        return [(e.index, e.term) for e in self.nodes[i].raft.raft_log.all_entries()]


def storage_with(entries: Iterable[tuple[int, int]], term: int, commit: int = 0) -> MemoryStorage:
    """A storage holding entries given as (index, term), with the given hard state."""
    storage = MemoryStorage()
    storage.append([Entry(term=t, index=i, data=f"e{i}t{t}".encode()) for i, t in entries])
    storage.set_hard_state(HardState(term=term, vote=0, commit=commit))
    return storage
