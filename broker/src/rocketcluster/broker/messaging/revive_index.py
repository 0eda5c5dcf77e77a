"""ReviveIndex: the deliveries the revive service (revive.py) looks at again, by
deadline. Its own module so that PopService, which feeds it, and the service, which
drains it, both import it and not each other."""

from __future__ import annotations

import heapq

StateKey = tuple[str, str, int]
RETRY_MS = 1_000  # a message the tier cannot read right now: looked at again then


class ReviveIndex:
    """Deliveries to look at again at their deadline: (deadline, queue, offset, nonce);
    nonce -1 names a message already visible. Entries are checked when due, so stale
    ones (acked, delivered again) cost nothing but a pop."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, StateKey, int, int]] = []

    def push(self, deadline_ms: int, key: StateKey, offset: int, nonce: int) -> None:
        heapq.heappush(self._heap, (deadline_ms, key, offset, nonce))

    def due(self, now_ms: int, limit: int = 1024) -> list[tuple[StateKey, int, int]]:
        out: list[tuple[StateKey, int, int]] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, key, offset, nonce = heapq.heappop(heap)
            out.append((key, offset, nonce))
        return out

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)
