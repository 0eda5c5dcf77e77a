"""DispatchBatch: the records of one append (or one replicated frame) as columns.

Dispatch writes a consume-queue entry and an index entry per record and tells the
send path's recent-ids table where each landed. Done record by record, that was a
tuple, a method call and a few dict lookups per message on every role (a slave does
nothing else). A batch instead keeps plain lists in commit-log order plus one
``QueueRun`` per topic/queue, holding that queue's packed 20-byte entries: a queue
gets one join and one write per dispatched batch, the index writer gets the columns.

Records of one queue inside a batch have consecutive queue offsets (the commit log
assigns them in order), so a run is its first offset and a count. Dispatch may stop
inside a batch (the confirm offset is a byte position): ``done`` records of it are
dispatched, and each run knows how many of its own are.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

from rocketcluster.broker.store.consumequeue import CQ_UNIT
from rocketcluster.broker.store.record import DispatchRequest, MessageToStore


class QueueRun:
    """The records of one topic/queue in a batch: their packed consume-queue entries
    (``CQ_UNIT``) and message ids, from queue offset ``first_offset`` on."""

    __slots__ = ("done", "first_offset", "ids", "number", "queue_id", "topic", "units")

    def __init__(self, topic: str, queue_id: int, first_offset: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.first_offset = first_offset
        self.units: list[bytes] = []
        self.ids: list[str] = []
        self.done = 0
        self.number = 0  # its index in the batch's runs

    @property
    def end_offset(self) -> int:
        """The queue offset after this run's last record."""
        return self.first_offset + len(self.units)


class LandedRun(NamedTuple):
    """Dispatched records of one queue, for the recent-ids table: ``msg_ids[k]``
    (possibly "") landed at queue offset ``first_offset + k``."""

    topic: str
    queue_id: int
    first_offset: int
    msg_ids: list[str]


class IndexColumns(NamedTuple):
    """What the index writer needs of dispatched records, as columns in commit-log
    order; ``keyed`` holds (topic, physical offset, size, keys) of the few with keys."""

    phys: list[int]
    sizes: list[int]
    ids: list[str]
    keyed: list[tuple[str, int, int, tuple[str, ...]]]


class DispatchBatch:
    """Records in commit-log order: ``phys``/``ends`` (byte range), ``ids`` (message
    id or ""), ``run_of`` (index into ``runs``); ``keys`` maps a record's position in
    the batch to its keys, for the few records that have any."""

    __slots__ = ("done", "ends", "ids", "keys", "phys", "run_of", "runs", "topic_of_keys")

    def __init__(self) -> None:
        self.phys: list[int] = []
        self.ends: list[int] = []
        self.ids: list[str] = []
        self.run_of: list[int] = []
        self.runs: list[QueueRun] = []
        self.keys: dict[int, tuple[str, ...]] = {}
        self.topic_of_keys: dict[int, str] = {}
        self.done = 0

    def __len__(self) -> int:
        return len(self.phys)

    @classmethod
    def of_appended(
        cls, msgs: Sequence[MessageToStore], records: Sequence[tuple[int, int, int]]
    ) -> DispatchBatch:
        """The batch of a local append: ``records[k]`` (physical offset, queue offset,
        size: an AppendedRecord) is where ``msgs[k]`` landed."""
        batch = cls()
        phys_col = batch.phys
        ends = batch.ends
        ids = batch.ids
        run_of = batch.run_of
        runs = batch.runs
        by_queue: dict[tuple[str, int], QueueRun] = {}
        pack = CQ_UNIT.pack
        for k, msg in enumerate(msgs):
            phys, qoff, size = records[k]
            key = (msg.topic, msg.queue_id)
            run = by_queue.get(key)
            if run is None or run.first_offset + len(run.units) != qoff:
                run = by_queue[key] = QueueRun(msg.topic, msg.queue_id, qoff)
                run.number = len(runs)
                runs.append(run)
            msg_id = msg.msg_id
            run.units.append(pack(phys, size, msg.tags_code))
            run.ids.append(msg_id)
            phys_col.append(phys)
            ends.append(phys + size)
            ids.append(msg_id)
            run_of.append(run.number)
            if msg.keys:
                batch.keys[k] = msg.keys
                batch.topic_of_keys[k] = msg.topic
        return batch

    def stop_at(self, limit: int) -> int:
        """How many records (from the start) end at or below ``limit``."""
        return bisect.bisect_right(self.ends, limit, self.done)

    def cut(self, physical_offset: int) -> int:
        """Forget records at or after ``physical_offset`` (never dispatched ones);
        returns how many remain."""
        keep = max(self.done, bisect.bisect_left(self.phys, physical_offset, self.done))
        if keep == len(self.phys):
            return keep
        counts = [0] * len(self.runs)
        for r in self.run_of[:keep]:
            counts[r] += 1
        for run, count in zip(self.runs, counts, strict=True):
            del run.units[count:]
            del run.ids[count:]
        del self.phys[keep:]
        del self.ends[keep:]
        del self.ids[keep:]
        del self.run_of[keep:]
        for k in [k for k in self.keys if k >= keep]:
            del self.keys[k]
            del self.topic_of_keys[k]
        return keep

    def run_counts(self, stop: int) -> list[int]:
        """How many records of each run are below ``stop`` (all when ``stop`` is the
        end of the batch)."""
        if stop == len(self.phys):
            return [len(run.units) for run in self.runs]
        counts = [run.done for run in self.runs]
        for r in self.run_of[self.done : stop]:
            counts[r] += 1
        return counts

    def index_columns(self, start: int, stop: int) -> IndexColumns:
        keyed = [
            (self.topic_of_keys[k], self.phys[k], self.ends[k] - self.phys[k], keys)
            for k, keys in self.keys.items()
            if start <= k < stop
        ]
        if start == 0 and stop == len(self.phys):
            phys, ends, ids = self.phys, self.ends, self.ids
        else:
            phys, ends, ids = self.phys[start:stop], self.ends[start:stop], self.ids[start:stop]
        return IndexColumns(phys, [e - p for e, p in zip(ends, phys, strict=True)], ids, keyed)

    def requests(self, start: int, stop: int) -> list[DispatchRequest]:
        """Records ``[start, stop)`` one by one (queue-offset bookkeeping, tools)."""
        out: list[DispatchRequest] = []
        seen = [0] * len(self.runs)
        for r in self.run_of[:start]:
            seen[r] += 1
        for k in range(start, stop):
            r = self.run_of[k]
            run = self.runs[r]
            phys, size, tags = CQ_UNIT.unpack(run.units[seen[r]])
            out.append(
                DispatchRequest(
                    run.topic,
                    run.queue_id,
                    run.first_offset + seen[r],
                    phys,
                    size,
                    tags,
                    self.ids[k],
                    self.keys.get(k, ()),
                )
            )
            seen[r] += 1
        return out
