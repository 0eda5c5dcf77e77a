"""RecentIds: where recently stored messages landed, by (topic, message id).

A producer retries a send whose answer it did not get with the same message id. When
the first attempt was in fact stored — the master died after writing it, a slave had
it and took over — storing the retry would put the message in the log twice, at two
offsets. The send path answers such a retry with the first copy's offset instead.
Fed from dispatch, so a slave that becomes master knows what its old master stored.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from rocketcluster.broker.store.record import DispatchRequest

DEFAULT_CAPACITY = 200_000


class Landed(NamedTuple):
    queue_id: int
    queue_offset: int


class RecentIds:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[tuple[str, str], Landed] = OrderedDict()
        self.duplicates = 0

    def record(self, batch: list[DispatchRequest]) -> None:
        ids = self._ids
        for req in batch:
            if req.msg_id:
                ids[(req.topic, req.msg_id)] = Landed(req.queue_id, req.queue_offset)
        while len(ids) > self.capacity:
            ids.popitem(last=False)

    def get(self, topic: str, msg_id: str) -> Landed | None:
        return self._ids.get((topic, msg_id))
