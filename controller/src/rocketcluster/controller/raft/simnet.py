"""A simulated packet network: seeded loss, duplication, delay, reordering, partitions.

Time is the simulator's tick counter. A message sent at tick `t` is delivered at
`t + delay`, with a random tie-break so messages due at the same tick arrive in random
order. Partitions are sets of blocked directed links, checked at delivery time, so a
partition also catches messages already in flight.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from heapq import heappop, heappush

from rocketcluster.controller.raft.types import Message


@dataclass(slots=True)
class LinkFaults:
    """Fault rates of the whole network; the simulator draws them from the seed."""

    loss: float = 0.0
    duplicate: float = 0.0
    min_delay: int = 0
    max_delay: int = 0


DropReason = str
DropHook = Callable[[Message, DropReason], None]


class SimNetwork:
    def __init__(self, rng: random.Random, faults: LinkFaults) -> None:
        self._rng = rng
        self.faults = faults
        self._queue: list[tuple[int, float, Message]] = []
        self.blocked: set[tuple[int, int]] = set()
        self.sent = 0
        self.delivered = 0
        self.dropped = 0
        self.duplicated = 0

    def __len__(self) -> int:
        return len(self._queue)

    def send(self, m: Message, now: int) -> None:
        rng = self._rng
        faults = self.faults
        self.sent += 1
        if faults.loss and rng.random() < faults.loss:
            self.dropped += 1
            return
        copies = 1
        if faults.duplicate and rng.random() < faults.duplicate:
            copies = 2
            self.duplicated += 1
        # Per copy: the delay, then the tie-break (the order of draws is part of a seed).
        lo, hi = faults.min_delay, faults.max_delay
        queue = self._queue
        for _ in range(copies):
            # lo + randrange(hi - lo + 1) draws exactly what randint(lo, hi) would.
            delay = lo + rng.randrange(hi - lo + 1) if hi > lo else lo
            heappush(queue, (now + delay, rng.random(), m))

    def due(self, now: int, on_drop: DropHook | None = None) -> list[Message]:
        """Pop every message due by `now` that may cross the network, in arrival order."""
        queue = self._queue
        out: list[Message] = []
        blocked = self.blocked
        while queue and queue[0][0] <= now:
            m = heappop(queue)[2]
            if blocked and (m.from_id, m.to) in blocked:
                self.dropped += 1
                if on_drop is not None:
                    on_drop(m, "partition")
                continue
            out.append(m)
        self.delivered += len(out)
        return out

    # --- partitions -------------------------------------------------------------------

    def partition(self, side: Iterable[int], nodes: Iterable[int]) -> None:
        """Cut every link between `side` and the rest of `nodes`, both directions."""
        inside = set(side)
        outside = set(nodes) - inside
        for a in inside:
            for b in outside:
                self.blocked.add((a, b))
                self.blocked.add((b, a))

    def block_one_way(self, src: int, dst: int) -> None:
        """`src` can no longer reach `dst`, while `dst` still reaches `src`."""
        self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()
