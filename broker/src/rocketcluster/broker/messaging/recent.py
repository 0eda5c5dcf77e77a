"""RecentIds: where recently stored messages landed, by (topic, message id).

A producer retries a send whose answer it did not get with the same message id. When
the first attempt was in fact stored — the master died after writing it, a slave had
it and took over — storing the retry would put the message in the log twice, at two
offsets. The send path answers such a retry with the first copy's offset instead.
Fed from dispatch, so a slave that becomes master knows what its old master stored.
"""

from __future__ import annotations

from itertools import count, repeat
from typing import NamedTuple

from rocketcluster.broker.store.dispatch_batch import LandedRun

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
        # (topic, message id) -> (queue id, queue offset): plain tuples, made in C.
        self._new: dict[tuple[str, str], tuple[int, int]] = {}
        self._old: dict[tuple[str, str], tuple[int, int]] = {}
        self.duplicates = 0

    def record(self, runs: list[LandedRun]) -> None:
        """Remember dispatched records: per queue run, ``msg_ids[k]`` landed at
        ``first_offset + k``. Filled with one ``dict.update`` per run (no Python-level
        step per record); records without an id land under "" and are dropped."""
        ids = self._new
        for topic, queue_id, first, msg_ids in runs:
            landed = zip(repeat(queue_id), count(first))  # endless: msg_ids bounds it
            ids.update(zip(zip(repeat(topic), msg_ids), landed, strict=False))
            ids.pop((topic, ""), None)
        if len(ids) >= self.capacity:
            self._old, self._new = ids, {}

    def get(self, topic: str, msg_id: str) -> Landed | None:
        key = (topic, msg_id)
        found = self._new.get(key) or self._old.get(key)
        return None if found is None else Landed._make(found)

    def __len__(self) -> int:
        return len(self._new) + len(self._old)
