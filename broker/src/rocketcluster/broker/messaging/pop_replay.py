"""PopJournalReplayer: a broker's progress through the POP journal, and its replay.

A slave applies the journal's records as they are dispatched (only confirmed data is
dispatched), so a promoted slave has the consumption state ready; a restarted broker
replays from the position it saved with its state snapshot (pop.py ``persist``), so
replay stays bounded. The position remembers the last record applied (or written,
on the master); if the log no longer holds that record where it was — an old master
whose unreplicated tail was cut when it rejoined — the state is rebuilt from the
whole retained journal instead of missing the records that replaced the tail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.pop_journal import (
    JOURNAL_QUEUE,
    JOURNAL_TOPIC,
    JournalFormatError,
    JournalPosition,
    KeyedOp,
    StateKey,
    apply_op,
    decode_record,
)
from rocketcluster.broker.store import AppendedRecord, MessageStore

log = logging.getLogger(__name__)

CHUNK = 256

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
        # No saved position: apply from the start, as a rebuild (the saved states, if
        # any, are older than whatever the journal holds).
        self._rebuilding = position is None
        self.position = position or JournalPosition(0)
        self.applied = 0
        self.rebuilds = 0
        self.undecodable = 0

    def wrote(self, record: AppendedRecord, record_id: str) -> None:
        """The master wrote this record itself: its state already holds it."""
        self.position = JournalPosition(
            record.queue_offset + 1, record.physical_offset, record.size, record_id
        )

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

    def catch_up(self) -> int:
        """Apply every dispatched record after the position; returns how many."""
        store = self._store
        cq = store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE)
        if cq is None:
            return 0
        if self.diverged():
            log.warning(
                "POP journal record %s at %d is gone from this log (a cut tail): "
                "rebuilding the consumption state from the retained journal",
                self.position.record_id,
                self.position.physical_offset,
            )
            self._restart(cq.min_index)
        start = self.position.next_index
        if start < cq.min_index:
            if start > 0:
                log.warning("POP journal trimmed below %d: rebuilding from it", cq.min_index)
            self._restart(cq.min_index)
            start = cq.min_index
        applied = 0
        clog_min = store.commitlog.min_offset
        while start < cq.max_index:
            entries = cq.entries(start, min(CHUNK, cq.max_index - start))
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
                self._apply(ops, self._rebuilding)
                self.position = JournalPosition(start, entry.physical_offset, entry.size, record_id)
                applied += 1
        self._rebuilding = False
        self.applied += applied
        return applied

    def _restart(self, index: int) -> None:
        self._forget()
        self.rebuilds += 1
        self._rebuilding = True
        self.position = JournalPosition(index)


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
