"""RecentIds: where recently stored messages landed, by (topic, message id).

A producer retries a send whose answer it did not get with the same message id. When
the first attempt was in fact stored — the master died after writing it, a slave had
it and took over — storing the retry would put the message in the log twice, at two
offsets. The send path answers such a retry with the first copy's offset instead.
Fed from dispatch, so a slave that becomes master knows what its old master stored.
"""

from __future__ import annotations

from typing import NamedTuple

from rocketcluster.broker.store.record import DispatchRequest

DEFAULT_CAPACITY = 200_000


class Landed(NamedTuple):
    queue_id: int
    queue_offset: int


class RecentIds:
    """The last ``capacity`` to ``2 * capacity`` stored messages, in two generations
    of plain dicts: when the newer one is full it becomes the older one and the
    oldest generation is dropped whole. Cheaper per record than evicting one entry
    at a time from an ordered dict, and this runs for every dispatched record."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._new: dict[tuple[str, str], Landed] = {}
        self._old: dict[tuple[str, str], Landed] = {}
        self.duplicates = 0

    def record(self, batch: list[DispatchRequest]) -> None:
        ids = self._new
        # tuple.__new__ makes the same Landed without the Python-level __new__ a
        # NamedTuple class call goes through (this runs for every dispatched record).
        new = tuple.__new__
        for req in batch:
            if req.msg_id:
                ids[(req.topic, req.msg_id)] = new(Landed, (req.queue_id, req.queue_offset))
        if len(ids) >= self.capacity:
            self._old, self._new = ids, {}

    def get(self, topic: str, msg_id: str) -> Landed | None:
        key = (topic, msg_id)
        return self._new.get(key) or self._old.get(key)

    def __len__(self) -> int:
        return len(self._new) + len(self._old)
