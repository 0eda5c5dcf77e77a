"""PopJournalReplayer: a broker's progress through the POP journal, and its replay.

A slave applies the journal's records as they are dispatched (only confirmed data is
dispatched), so a promoted slave has the consumption state ready; a restarted broker
replays from the position it saved with its state snapshot (pop.py ``persist``), so
replay stays bounded. The position remembers the last record applied (or written,
on the master); if the log no longer holds that record where it was (an old master
whose unreplicated tail was cut when it rejoined), the state is rebuilt instead of
missing the records that replaced the tail.

A rebuild starts from the latest checkpoint in the log (pop_journal.py), found by
scanning the consume queue backwards for its tag, so its cost is the records written
since that checkpoint, not the whole retained journal (which lives as long as the
commit log: replaying it took a replica of the seed-3 soak up to 33 s, during which
its loop served nothing). Without a checkpoint in reach it starts from the journal's
first retained record. ``catch_up(limit)`` applies at most ``limit`` records, so the
caller can give the event loop back between slices (pop.py ``replay``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.pop_journal import (
    CHECKPOINT_TAG,
    JOURNAL_QUEUE,
    JOURNAL_TOPIC,
    JournalFormatError,
    JournalPosition,
    KeyedOp,
    StateKey,
    apply_op,
    decode_record,
    record_part,
)
from rocketcluster.broker.store import AppendedRecord, MessageStore
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.record import tags_code

log = logging.getLogger(__name__)

CHUNK = 256
# How far back a rebuild looks for a checkpoint, in journal records: several times the
# master's cadence (pop.py CHECKPOINT_EVERY_RECORDS), so only a journal written without
# checkpoints (an older version's) is replayed from its start.
CHECKPOINT_SCAN_RECORDS = 100_000
SCAN_CHUNK = 4096
# Read by the chaos suite's check of the brokers' logs (ctl/chaos/broker_logs.py).
REBUILD_MESSAGE = (
    "rebuilding the POP consumption state from %s (journal index %d): %d records to apply"
)
REBUILT_MESSAGE = "POP consumption state rebuilt in %.2f s"
FROM_CHECKPOINT = "a checkpoint"
FROM_START = "the journal's first retained record"

# Applies decoded ops; ``rebuilding``: skip deltas of queues not seen yet (their base
# is unknown until a snapshot op names it).
Apply = Callable[[list[KeyedOp], bool], None]


class PopJournalReplayer:
    def __init__(
        self,
        store: MessageStore,
        apply: Apply,
        forget: Callable[[], None],
        position: JournalPosition | None,
    ) -> None:
        self._store = store
        self._apply = apply
        self._forget = forget
        # No saved position: start as a rebuild, from the latest checkpoint (the saved
        # states, if any, are older than whatever the journal holds).
        self._fresh = position is None
        self.position = position or JournalPosition(0)
        # While rebuilding: the index up to which deltas of queues that no snapshot op
        # named yet are skipped (their base is unknown).
        self._rebuild_until: int | None = None
        self._rebuild_started = 0.0
        self.applied = 0
        self.rebuilds = 0
        self.undecodable = 0

    @property
    def rebuilding(self) -> bool:
        """Whether the states are being rebuilt (not yet the log's: not to be saved)."""
        return self._rebuild_until is not None

    def wrote(self, record: AppendedRecord, record_id: str) -> None:
        """The master wrote this record itself: its state already holds it."""
        self._fresh = False
        self.position = JournalPosition(
            record.queue_offset + 1, record.physical_offset, record.size, record_id
        )

    def behind(self) -> bool:
        """Whether dispatched records wait to be applied."""
        cq = self._store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE)
        return cq is not None and self.position.next_index < cq.max_index

    def diverged(self) -> bool:
        """Whether the record this broker applied last is no longer in its log."""
        pos = self.position
        clog = self._store.commitlog
        if pos.physical_offset < 0 or pos.physical_offset < clog.min_offset:
            return False  # nothing applied yet, or trimmed by retention: cannot tell
        if pos.physical_offset + pos.size > clog.write_offset:
            return True  # cut off with the tail
        try:
            msg = self._store.read_message(pos.physical_offset, pos.size, count_cache=False)
            return msg.topic != JOURNAL_TOPIC or decode_record(msg.body)[0] != pos.record_id
        except Exception:
            return True  # another record (or none) starts there now

    def catch_up(self, limit: int | None = None) -> int:
        """Apply the dispatched records after the position (at most ``limit``);
        returns how many."""
        store = self._store
        cq = store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE)
        if cq is None:
            return 0
        if self._fresh:
            self._fresh = False
            self._rebuild(cq, forget=False)
        elif self.diverged():
            log.warning(
                "POP journal record %s at %d is gone from this log (a cut tail): "
                "rebuilding the consumption state",
                self.position.record_id,
                self.position.physical_offset,
            )
            self._rebuild(cq, forget=True)
        elif self.position.next_index < cq.min_index:
            log.warning("POP journal trimmed below %d: rebuilding", cq.min_index)
            self._rebuild(cq, forget=True)
        start = self.position.next_index
        end = cq.max_index if limit is None else min(cq.max_index, start + limit)
        applied = 0
        clog_min = store.commitlog.min_offset
        while start < end:
            entries = cq.entries(start, min(CHUNK, end - start))
            if not entries:
                break
            for entry in entries:
                start += 1
                if entry.physical_offset < clog_min:
                    continue  # removed by retention meanwhile
                msg = store.read_message(entry.physical_offset, entry.size, count_cache=False)
                try:
                    record_id, ops = decode_record(msg.body)
                except JournalFormatError as exc:
                    self.undecodable += 1
                    log.warning("skipping POP journal record at %d: %s", entry.physical_offset, exc)
                    record_id, ops = "", []
                self._apply(ops, self._rebuild_until is not None)
                self.position = JournalPosition(start, entry.physical_offset, entry.size, record_id)
                applied += 1
        self.applied += applied
        if self._rebuild_until is not None and start >= self._rebuild_until:
            self._rebuild_until = None
            log.info(REBUILT_MESSAGE, time.monotonic() - self._rebuild_started)
        return applied

    def _rebuild(self, cq: ConsumeQueue, *, forget: bool) -> None:
        """Start over from the latest checkpoint (or the first retained record): the
        states so far are not this log's."""
        if forget:
            self._forget()
            self.rebuilds += 1
        begin = self.latest_checkpoint(cq)
        start = cq.min_index if begin is None else begin
        self.position = JournalPosition(start)
        if cq.max_index <= start:
            return  # an empty journal: nothing to rebuild from
        # Deltas of queues no snapshot op named are skipped up to what is dispatched
        # now: past a checkpoint's end every queue of the master's has a base.
        self._rebuild_until = cq.max_index
        self._rebuild_started = time.monotonic()
        log.info(
            REBUILD_MESSAGE,
            FROM_START if begin is None else FROM_CHECKPOINT,
            start,
            cq.max_index - start,
        )

    def latest_checkpoint(self, cq: ConsumeQueue) -> int | None:
        """The first journal index of the latest whole checkpoint, scanning back at
        most CHECKPOINT_SCAN_RECORDS; None without one."""
        code = tags_code(CHECKPOINT_TAG)
        clog_min = self._store.commitlog.min_offset
        end = cq.max_index
        floor = max(cq.min_index, end - CHECKPOINT_SCAN_RECORDS)
        while end > floor:
            low = max(floor, end - SCAN_CHUNK)
            entries = cq.entries(low, end - low)
            for i in range(len(entries) - 1, -1, -1):
                entry = entries[i]
                if entry.tags_code == code and entry.physical_offset >= clog_min:
                    begin = self._checkpoint_begin(cq, low + i)
                    if begin is not None:
                        return begin
            end = low
        return None

    def _checkpoint_begin(self, cq: ConsumeQueue, last: int) -> int | None:
        """Where the checkpoint whose last record is at ``last`` starts, if all of its
        records are still there (the write's records are consecutive in the queue)."""
        try:
            write, part = record_part(self._record_id(cq, last))
            begin = last - part
            if begin < cq.min_index or self._record_id(cq, begin) != f"{write}.0":
                return None
        except Exception as exc:  # unreadable, undecodable, trimmed: not one to start from
            log.debug("POP journal checkpoint ending at %d is not usable: %s", last, exc)
            return None
        return begin

    def _record_id(self, cq: ConsumeQueue, index: int) -> str:
        entry = cq.get(index)
        if entry is None or entry.physical_offset < self._store.commitlog.min_offset:
            raise LookupError(f"journal index {index} is no longer retained")
        msg = self._store.read_message(entry.physical_offset, entry.size, count_cache=False)
        return decode_record(msg.body)[0]


def apply_replayed(
    states: dict[StateKey, QueueConsumeState],
    load: Callable[[StateKey], QueueConsumeState],
    ops: list[KeyedOp],
    rebuilding: bool,
) -> None:
    """Apply journal ops to a broker's states: a snapshot op replaces the queue's
    state, others change it (loaded from the local snapshot when first named, unless
    ``rebuilding``: then a queue counts only from its first snapshot op)."""
    for key, op in ops:
        kind = op[0]
        if kind == "Z":
            states[key] = QueueConsumeState.from_full(op[1])
            continue
        if kind == "X":
            states.pop(key, None)
            continue
        state = states.get(key)
        if state is None:
            if rebuilding:
                continue
            state = load(key)
        try:
            apply_op(state, op)
        except (ValueError, TypeError, JournalFormatError) as exc:
            # Only on a base this replica did not share (a journal joined midway): the
            # master's next snapshot of the queue repairs it.
            log.debug("POP journal op %r on %s does not apply: %s", op, key, exc)
