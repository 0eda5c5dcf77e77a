"""PopService: POP-style consumption for every consumer group on this broker.

Receive picks messages from the group's queues (expired deliveries first, then new
ones), makes them invisible for the requested duration and hands out receipt
handles; ack marks them done and moves the group's committed offset; an expired or
nacked delivery comes back with ``delivery_attempt + 1``; after the group's maximum
attempts the message goes to ``%DLQ%<group>`` instead (on that receive, or by the
revive service when nobody receives any more: revive.py).

On the master every state change is recorded in the POP journal (pop_journal.py) and
a receive or ack is answered only once its record is replicated like a message;
slaves apply the journal, so a failover neither redelivers acknowledged messages nor
resets retry counts. States are also snapshotted locally every
``consume_state_persist_ms`` with the journal position, so a restart replays only
the journal after it; a restarted broker then redelivers what was in flight
(at-least-once, attempts kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code, ForeignReceipt, MessagingError, put_code
from rocketcluster.broker.messaging.consume_state import Op, QueueConsumeState
from rocketcluster.broker.messaging.filters import MessageFilter
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop_journal import (
    JOURNAL_QUEUE,
    JOURNAL_TOPIC,
    JournalPosition,
    KeyedOp,
    PopJournalWriter,
    Put,
    writer_name,
)
from rocketcluster.broker.messaging.pop_replay import PopJournalReplayer, apply_replayed
from rocketcluster.broker.messaging.receipt import (
    InvalidReceiptHandle,
    ReceiptHandle,
    decode_handle,
)
from rocketcluster.broker.messaging.revive_index import RETRY_MS, ReviveIndex
from rocketcluster.broker.messaging.trace import TraceRecorder, message_id_of
from rocketcluster.broker.stats.reads import ReadRecorder
from rocketcluster.broker.store import MessageStore, MessageToStore, StoredMessage
from rocketcluster.broker.store.consumequeue import ConsumeQueue

log = logging.getLogger(__name__)

SCAN_LIMIT = 1024  # entries looked at per queue per receive (filters skip the rest)
UNBOUNDED_BYTES = 1 << 62  # no byte budget: a stream answers one frame per message
RECHECK_SECONDS = 0.5  # long polls re-check for expired deliveries this often
DLQ_TRANSIT_MS = 60_000

POSITION_KEY = "popjournal/position"
STATE_PREFIX = "pop/"
# The master writes a checkpoint (every state in one write: pop_journal.py) when it takes
# over and after this many journal records (or as many as it has states, if more); a
# replica that must rebuild replays about that many records (tens of microseconds each).
CHECKPOINT_EVERY_RECORDS = 10_000
CHECKPOINT_RETRY_S = 10.0  # after a checkpoint could not be written (no in-sync replicas)
# Journal records a slave applies before giving the event loop back (a few ms of work).
REPLAY_SLICE = 256

# The dead letter of a message (group, message, attempts): a copy for %DLQ%<group>.
DeadLetterCopy = Callable[[str, StoredMessage, int], MessageToStore]
StateKey = tuple[str, str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


class ColdReads(Protocol):
    """Tiered storage as receive sees it (broker/tiered/service.py)."""

    def wants(self, cq: ConsumeQueue, offset: int) -> bool: ...
    async def read(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[StoredMessage]: ...
    def fell_back(self) -> None: ...
    def resume_at(self, topic: str, queue_id: int, offset: int) -> int | None: ...


@dataclass(slots=True)
class Delivery:
    message: StoredMessage
    receipt: ReceiptHandle
    attempt: int
    invisible_ms: int

    @property
    def handle(self) -> str:
        """The text receipt handle (MessagingService); ConsumeService packs the
        receipt's fields instead, so it is only encoded when asked for."""
        return self.receipt.encode()


class PopService:
    def __init__(
        self,
        store: MessageStore,
        notifier: ArrivalNotifier,
        tuning: MessagingTuning,
        dead_letter: DeadLetterCopy,
        reads: ReadRecorder | None = None,
        *,
        put: Put | None = None,
        group_spec: Callable[[str], ConsumerGroupSpec | None] = lambda _: None,
        dead_lettered: Callable[[str, StoredMessage, int], None] = lambda *_: None,
        broker_group: str = "",
        checkpoint_every: int = CHECKPOINT_EVERY_RECORDS,
    ) -> None:
        self._store = store
        self._checkpoint_every = checkpoint_every
        # Applies the rest of a long replay (a rebuild) in slices: replay().
        self._replaying: asyncio.Task[None] | None = None
        # Stamped into every receipt handle, so a handle acknowledged at another group
        # finds its way here (cross_group.py); "" mints group-less handles (tests).
        self.broker_group = broker_group
        # When consumers were last served, per queue and segment (stats snapshots).
        self._reads = reads
        self._notifier = notifier
        self._tuning = tuning
        self._dead_letter = dead_letter
        self._dead_lettered = dead_lettered
        self._group_spec = group_spec
        self._states: dict[StateKey, QueueConsumeState] = {}
        # Master only: states record their changes into the journal (pop_journal.py).
        self.master = False
        self.journal = PopJournalWriter(put or store.put_batch, writer=writer_name())
        self.replayer = PopJournalReplayer(
            store,
            self._apply_replayed,
            self._forget_all,
            JournalPosition.from_json(store.metadata.get_value(POSITION_KEY)),
        )
        self.journal.on_written = self.replayer.wrote
        self._saved_position: dict[str, object] | None = None
        # Queues changed since their last snapshot op (the revive service snapshots them).
        self._since_snapshot: set[StateKey] = set()
        # Deliveries at their group's last attempt, by deadline (the revive service).
        self.revive_index = ReviveIndex()
        self._rotation: dict[tuple[str, str], int] = {}
        # Nonces only need to differ between deliveries; starting from the clock keeps
        # them distinct across restarts too.
        self._nonces = itertools.count(time.time_ns() // 1000)
        self._persisted: dict[StateKey, float] = {}
        # Tiered storage, when enabled: messages local retention removed (or, by the
        # read policy, ones it did not) are read from the tier.
        self.cold: ColdReads | None = None
        # Server-side message traces (trace.py); None: nothing is traced.
        self.trace: TraceRecorder | None = None

    # -- state -----------------------------------------------------------------

    def state(self, group: str, topic: str, queue_id: int) -> QueueConsumeState:
        key = (group, topic, queue_id)
        state = self._states.get(key)
        if state is None:
            saved = self._store.metadata.get_value(_state_key(key))
            committed = self._store.metadata.get_offset(group, topic, queue_id)
            if isinstance(saved, dict):
                state = QueueConsumeState.restore(saved)
                if committed is not None:
                    # A broker that is master again still has the state it saved in
                    # its earlier term; what the group acknowledged since then came in
                    # with the replicated offsets: without this, all of it is
                    # redelivered after every failover (found by the chaos suite).
                    state.advance_to(committed)
            else:
                if committed is None:  # a new group starts at the earliest retained message
                    committed = self._store.queue_offsets(topic, queue_id)[0]
                state = QueueConsumeState(committed)
            self._states[key] = state
            if self.master:  # the replicas learn this queue's base before its changes
                self._record(key, ["Z", state.full_snapshot()])
                state.sink = self._sink(key)
        lo, _ = self._store.queue_offsets(topic, queue_id)
        state.advance_to(lo)
        return state

    def _sink(self, key: StateKey) -> Callable[[Op], None]:
        return lambda op: self._record(key, op)

    def _record(self, key: StateKey, op: Op) -> None:
        self.journal.append(key, op)
        self._since_snapshot.add(key)

    # -- roles and the journal -------------------------------------------------

    def recover(self) -> int:
        """At start: replay the journal after the saved position; what was in flight
        is then delivered again (its consumers may be gone), attempts kept."""
        applied = self.replayer.catch_up()
        for state in self._states.values():
            state.release_all()
        return applied

    def promote(self) -> None:
        """Become the master: apply the rest of the journal (every record is in the
        consume queue by now: the confirm offset was raised to the log's end), then
        record every change from here on, starting with a checkpoint (a replica that
        was cut by this failover rebuilds from it)."""
        self._store.dispatcher.dispatch_until(self._store.dispatch_limit)
        self.replayer.catch_up()
        self.master = True
        self.revive_index.clear()
        for key, state in self._states.items():
            state.sink = self._sink(key)
            self._watch_all(key, state)
        self._load_saved()
        self.checkpoint()

    def _load_saved(self) -> None:
        """Load the states saved here that no journal record named since (a master's
        checkpoint must hold every state, not only those in memory)."""
        for name in self._store.metadata.values_with_prefix(STATE_PREFIX):
            group, _, rest = name[len(STATE_PREFIX) :].partition("/")
            topic, _, qid = rest.rpartition("/")
            if group and topic and qid.isdigit() and (group, topic, int(qid)) not in self._states:
                self.state(group, topic, int(qid))

    def checkpoint(self) -> int:
        """Write every state as one checkpoint (the master); returns how many. Not
        while there is neither a state nor a journal (a broker nobody consumed from
        with POP): nothing could be rebuilt, and nothing is written."""
        ops: list[KeyedOp] = [(key, ["Z", s.full_snapshot()]) for key, s in self._states.items()]
        if not ops and self._store.queues.get(JOURNAL_TOPIC, JOURNAL_QUEUE) is None:
            return 0
        self.journal.append_checkpoint(ops)
        self._since_snapshot.clear()
        return len(ops)

    def checkpoint_if_due(self) -> bool:
        """A checkpoint once CHECKPOINT_EVERY_RECORDS records followed the last one,
        or as many records as there are states when there are more: a checkpoint of
        100,000 states is 3 MiB (0.6 s of CPU), so it stays a fraction of the journal."""
        journal = self.journal
        due = max(self._checkpoint_every, len(self._states))
        failed = journal.checkpoint_failed_at
        if (
            not self.master
            or journal.checkpoint_pending
            or journal.records_since_checkpoint < due
            or (failed is not None and time.monotonic() - failed < CHECKPOINT_RETRY_S)
        ):
            return False
        self.checkpoint()
        return True

    def demote(self) -> None:
        """No longer master: the new master's journal is applied from now on (a tail
        of this one the group did not keep is found and rebuilt: pop_replay.py)."""
        self.master = False
        for state in self._states.values():
            state.sink = None
        self.journal.drop_pending("this broker is no longer the master")
        self.revive_index.clear()

    def replay(self) -> int:
        """A slave: apply journal records dispatched since the last call, a slice now
        and the rest (a rebuild, a backlog) in a task that yields between slices, so
        replication and heartbeats go on meanwhile; returns how many were applied now."""
        if self.master:
            return 0
        applied = self.replayer.catch_up(REPLAY_SLICE)
        if self._replaying is None and self.replayer.behind():
            self._replaying = asyncio.get_running_loop().create_task(
                self._replay_rest(), name="pop-journal-replay"
            )
        return applied

    async def _replay_rest(self) -> None:
        try:
            while not self.master and self.replayer.behind():
                await asyncio.sleep(0)
                if self.master:
                    break
                before = self.replayer.position.next_index
                self.replayer.catch_up(REPLAY_SLICE)
                if self.replayer.position.next_index == before:
                    break  # nothing readable yet: the next dispatch goes on
        except Exception:
            log.exception("replaying the POP journal failed; the next dispatch retries")
        finally:
            self._replaying = None

    async def replayed(self) -> None:
        """Wait until the replay under way (if any) has applied what was dispatched."""
        while self._replaying is not None:
            await asyncio.shield(self._replaying)

    async def close(self) -> None:
        """Stop replaying in the background (the broker stops)."""
        task, self._replaying = self._replaying, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _apply_replayed(self, ops: list[KeyedOp], rebuilding: bool) -> None:
        apply_replayed(self._states, lambda key: self.state(*key), ops, rebuilding)

    def _forget_all(self) -> None:
        """The saved and in-memory states are not this log's: start from the replicated
        committed offsets, then the journal."""
        self._states.clear()
        self._store.metadata.put_values(
            {k: None for k in self._store.metadata.values_with_prefix(STATE_PREFIX)}
        )

    def snapshot_active(self) -> int:
        """Snapshot ops for queues changed since their last one, so replay after a
        rebuild (or on a slave that joined midway) has a recent base for each."""
        keys, self._since_snapshot = self._since_snapshot, set()
        count = 0
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                self.journal.append(key, ["Z", state.full_snapshot()])
                count += 1
        return count

    async def recorded(self, what: str) -> None:
        """Wait until the changes made so far are stored and replicated; raise the
        write's failure (the client retries) otherwise."""
        if not self.master:
            return
        result = await self.journal.sync()
        if not result.ok:
            raise MessagingError(
                put_code(result.status),
                f"{what} could not be recorded: {result.reason or result.status.value}; "
                "retry shortly",
            )

    def _watch(self, key: StateKey, offset: int, attempt: int, deadline: int, nonce: int) -> None:
        """Index a delivery at its group's last attempt: when it expires it is
        dead-lettered even if nobody receives from the group any more."""
        group = self._group_spec(key[0])
        if group is not None and attempt >= group.max_delivery_attempts:
            self.revive_index.push(deadline, key, offset, nonce)

    def _watch_all(self, key: StateKey, state: QueueConsumeState) -> None:
        for offset, entry in state.inflight.items():
            self._watch(key, offset, entry.attempt, entry.deadline_ms, entry.nonce)
        for offset, attempts in state.waiting.items():
            self._watch(key, offset, attempts, 0, -1)

    def states(self) -> dict[StateKey, QueueConsumeState]:
        return dict(self._states)

    # -- receive ---------------------------------------------------------------

    async def receive(
        self,
        group: ConsumerGroupSpec,
        topic: TopicSpec,
        queue_id: int,
        message_filter: MessageFilter,
        batch_size: int,
        invisible_ms: int,
        *,
        auto_renew: bool,
        client_id: str,
        wait_seconds: float,
        max_bytes: int | None = None,
    ) -> list[Delivery]:
        """Deliver up to ``batch_size`` messages, long-polling up to ``wait_seconds``.

        ``max_bytes`` bounds the bodies and properties of one answer that is a single
        frame (ReceiveBatch): delivery stops once it is reached, after at least one
        message. A message delivered but never sent would stay invisible for nothing,
        so the budget is kept here, not by trimming the answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        if auto_renew:
            invisible_ms = self._tuning.auto_renew_invisible_ms
        while True:
            queues = self._queues_to_try(group.name, topic, queue_id)
            out: list[Delivery] = []
            room = max_bytes if max_bytes is not None else UNBOUNDED_BYTES
            for qid in queues:
                if len(out) >= batch_size or room <= 0:
                    break
                got, room = await self._pop_queue(
                    group,
                    topic.name,
                    qid,
                    message_filter,
                    batch_size - len(out),
                    invisible_ms,
                    auto_renew,
                    client_id,
                    room,
                )
                out += got
            if out:
                await self.recorded("the delivery")
                return out
            remaining = deadline - loop.time()
            if remaining <= 0:
                return out
            await self._notifier.wait(topic.name, min(remaining, RECHECK_SECONDS))

    def _queues_to_try(self, group: str, topic: TopicSpec, queue_id: int) -> list[int]:
        if queue_id >= 0:
            if queue_id >= topic.queues:
                raise MessagingError(
                    Code.BAD_REQUEST, f"topic {topic.name!r} has no queue {queue_id}"
                )
            return [queue_id]
        start = self._rotation.get((group, topic.name), 0)
        self._rotation[(group, topic.name)] = (start + 1) % topic.queues
        return [(start + i) % topic.queues for i in range(topic.queues)]

    async def _pop_queue(
        self,
        group: ConsumerGroupSpec,
        topic: str,
        qid: int,
        message_filter: MessageFilter,
        limit: int,
        invisible_ms: int,
        auto_renew: bool,
        client_id: str,
        room: int,
    ) -> tuple[list[Delivery], int]:
        """Up to ``limit`` deliveries from one queue, and the byte budget left of
        ``room`` after them."""
        state = self.state(group.name, topic, qid)
        now = now_ms()
        if group.fifo and state.blocked_for_fifo(now):
            return [], room
        store = self._store
        cq = store.queues.get(topic, qid)
        if cq is None:
            return [], room
        clog_min = store.commitlog.min_offset
        broker_group = self.broker_group
        out: list[Delivery] = []
        to_dead_letter: list[tuple[int, StoredMessage, int]] = []
        trace = self.trace
        mode = trace.topic_mode(topic) if trace is not None else None
        tracer = trace if mode is not None else None  # None: no message of it is traced

        def full() -> bool:
            return len(out) >= limit or room <= 0

        def deliver(offset: int, msg: StoredMessage, attempt: int) -> None:
            nonlocal room
            room -= msg.payload_bytes
            nonce = next(self._nonces)
            deadline = now + invisible_ms
            state.deliver(offset, attempt, deadline, nonce, client_id, auto_renew)
            if attempt >= group.max_delivery_attempts:
                self.revive_index.push(deadline, (group.name, topic, qid), offset, nonce)
            receipt = ReceiptHandle(topic, qid, offset, attempt, nonce, deadline, broker_group)
            out.append(Delivery(msg, receipt, attempt, invisible_ms))
            if tracer is not None:
                msg_id = message_id_of(msg)
                if tracer.wants(topic, msg_id, mode):
                    tracer.delivered(
                        msg_id,
                        (group.name, topic, qid, offset),
                        attempt=attempt,
                        invisible_until=deadline,
                        client_id=client_id,
                    )

        for offset, attempts in state.redeliverable(now):
            if full():
                break
            entry = cq.get(offset)
            local = entry if entry is not None and entry.physical_offset >= clog_min else None
            if local is not None and not self._cold_wanted(cq, offset):
                msg = store.read_message(local.physical_offset, local.size)
            elif found := await self._read_cold(topic, qid, offset, 1):
                msg = found[0]
            elif local is not None:  # the tier failed or lacks it: the disk has it
                msg = store.read_message(local.physical_offset, local.size)
            else:
                if found is not None:
                    state.mark_done(offset)  # removed by retention meanwhile
                continue  # (None: the tier fails; redelivered once it answers)
            if tracer is not None:
                expired = state.inflight.get(offset)
                self.trace_expired(
                    (group.name, topic, qid, offset),
                    msg,
                    attempts,
                    expired.deadline_ms if expired is not None else None,
                )
            if attempts >= group.max_delivery_attempts:
                state.deliver(offset, attempts, now + DLQ_TRANSIT_MS, next(self._nonces))
                to_dead_letter.append((offset, msg, attempts))
                continue
            deliver(offset, msg, attempts + 1)

        scanned = 0
        while not full() and state.next_offset < cq.max_index and scanned < SCAN_LIMIT:
            if group.fifo and to_dead_letter:
                break  # keep order: later messages wait until the dead letters are out
            start = state.next_offset
            wanted = self._cold_wanted(cq, start)
            if start < cq.min_index and not wanted:
                # Neither the tier nor the disk has it (deleted while tiering was off).
                resume = self.cold.resume_at(topic, qid, start) if self.cold else None
                target = min(x for x in (resume, cq.min_index) if x is not None and x > start)
                if state.committed == start:
                    state.advance_to(target)
                else:
                    for gone in range(start, min(target, start + SCAN_LIMIT - scanned)):
                        state.skip_new(gone)
                        scanned += 1
                continue
            if wanted:
                cold = await self._read_cold(topic, qid, start, SCAN_LIMIT - scanned)
                if cold is None and start < cq.min_index:
                    break  # the tier fails and the data is only there: nothing skipped, later
                if state.next_offset != start:
                    continue  # another receive moved this queue on while we waited
                for msg in cold or ():
                    scanned += 1
                    if not _wanted(msg, message_filter, group.name):
                        state.skip_new(msg.queue_offset)
                        continue
                    deliver(msg.queue_offset, msg, 1)
                    if full():
                        break
                if cold:
                    continue  # (None: the tier failed, the local copy serves)
            entries = cq.entries(start, min(64, SCAN_LIMIT - scanned))
            if not entries:
                break
            for entry in entries:
                offset = state.next_offset
                if entry.physical_offset < clog_min and self._cold_wanted(cq, offset):
                    break  # retention removed it meanwhile: the tier serves it
                scanned += 1
                if entry.physical_offset < clog_min or not message_filter.matches_code(
                    entry.tags_code
                ):
                    state.skip_new(offset)
                    continue
                msg = store.read_message(entry.physical_offset, entry.size)
                if not _wanted(msg, message_filter, group.name):
                    state.skip_new(offset)
                    continue
                deliver(offset, msg, 1)
                if full():
                    break
        if out and self._reads is not None:  # once per batch (DESIGN §9)
            first, last = out[0].message.physical_offset, out[-1].message.physical_offset
            self._reads.served(topic, qid, first, last, now)
        self._commit(group.name, topic, qid, state)
        for offset, msg, attempts in to_dead_letter:
            await self._to_dead_letter((group.name, topic, qid), state, offset, msg, attempts)
        return out, room

    async def _to_dead_letter(
        self,
        key: StateKey,
        state: QueueConsumeState,
        offset: int,
        msg: StoredMessage,
        attempts: int,
    ) -> bool:
        """Store the dead letter and the record that marks the message done in one put
        (so a failover keeps both or neither); the caller reserved the offset."""
        group = key[0]
        copy = self._dead_letter(group, msg, attempts)
        if self.master:
            self.journal.append(key, ["K", offset])
            result = await self.journal.sync([copy])
        else:  # a broker without a journal writer (tests of the pure service)
            result = await self._store.put(copy)
        if not result.records:  # not stored: retried on a later receive or revive
            log.warning("moving %s to the DLQ failed: %s", msg.msg_id, result.reason)
            state.make_visible(offset)
            if self.master:
                self.revive_index.push(now_ms() + RETRY_MS, key, offset, -1)
            return False
        sink, state.sink = state.sink, None  # the record above holds the done op
        state.mark_done(offset)
        state.sink = sink
        self._commit(group, key[1], key[2], state)
        self._dead_lettered(group, msg, attempts)
        if self.trace is not None:
            msg_id = message_id_of(msg)
            if self.trace.wants(key[1], msg_id):
                self.trace.dead_lettered(msg_id, (*key, offset), dlq=copy.topic, attempts=attempts)
        return True

    def trace_expired(
        self, key: tuple[str, str, int, int], msg: StoredMessage, attempt: int, deadline: int | None
    ) -> None:
        """Trace that the delivery at ``key`` (group, topic, queue, offset) is over
        without an ack: its invisibility ran out at ``deadline``, or (None) it was
        made visible before (its client went away)."""
        trace = self.trace
        if trace is None:
            return
        msg_id = message_id_of(msg)
        if trace.wants(key[1], msg_id):
            trace.expired(msg_id, key, attempt=attempt, deadline=deadline)

    async def read_at(self, topic: str, qid: int, offset: int) -> tuple[StoredMessage | None, bool]:
        """The message at ``offset`` (local or tiered), and whether it is gone for good."""
        store = self._store
        cq = store.queues.get(topic, qid)
        if cq is None:
            return None, False
        entry = cq.get(offset)
        local = (
            entry
            if entry is not None and entry.physical_offset >= store.commitlog.min_offset
            else None
        )
        if local is not None and not self._cold_wanted(cq, offset):
            return store.read_message(local.physical_offset, local.size), False
        found = await self._read_cold(topic, qid, offset, 1)
        if found:
            return found[0], False
        if local is not None:
            return store.read_message(local.physical_offset, local.size), False
        return None, found is not None

    def loaded(self, key: StateKey) -> QueueConsumeState | None:
        return self._states.get(key)

    def group_spec(self, name: str) -> ConsumerGroupSpec | None:
        return self._group_spec(name)

    async def dead_letter_now(
        self,
        key: StateKey,
        state: QueueConsumeState,
        offset: int,
        msg: StoredMessage,
        attempts: int,
    ) -> bool:
        """Reserve ``offset`` (invisible while the dead letter is written), then move it."""
        state.deliver(offset, attempts, now_ms() + DLQ_TRANSIT_MS, next(self._nonces))
        return await self._to_dead_letter(key, state, offset, msg, attempts)

    def _cold_wanted(self, cq: ConsumeQueue, offset: int) -> bool:
        return self.cold is not None and self.cold.wants(cq, offset)

    async def _read_cold(
        self, topic: str, qid: int, offset: int, max_count: int
    ) -> list[StoredMessage] | None:
        """Messages from the tier; None when it failed (counted as a fallback: the
        caller serves the local copy if there is one, else waits)."""
        if self.cold is None:
            return []
        try:
            return await self.cold.read(topic, qid, offset, max_count)
        except Exception as exc:
            log.warning("cold read of %s/%d@%d failed: %r", topic, qid, offset, exc)
            self.cold.fell_back()
            return None

    def _commit(self, group: str, topic: str, qid: int, state: QueueConsumeState) -> None:
        if self._store.metadata.get_offset(group, topic, qid) != state.committed:
            self._store.metadata.commit_offset(group, topic, qid, state.committed)

    # -- ack, nack, dead letters -------------------------------------------------

    def _handle(self, topic: str, text: str) -> ReceiptHandle:
        try:
            handle = decode_handle(text)
        except InvalidReceiptHandle as exc:
            raise MessagingError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from exc
        if topic and handle.topic != topic:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE,
                f"receipt handle is for topic {handle.topic!r}, not {topic!r}",
            )
        if handle.group and handle.group != self.broker_group:
            raise ForeignReceipt(handle.group)
        return handle

    def ack(self, group: str, topic: str, handle_text: str) -> None:
        """Acknowledge one delivery; an older handle of the same message works too."""
        handle = self._handle(topic, handle_text)
        state = self.state(group, handle.topic, handle.queue_id)
        if handle.queue_offset >= state.next_offset:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE, "receipt handle names a message never delivered"
            )
        state.mark_done(handle.queue_offset)
        self._commit(group, handle.topic, handle.queue_id, state)
        if self.trace is not None:
            self.trace.acked((group, handle.topic, handle.queue_id, handle.queue_offset))

    def ack_many(
        self, group: str, topic: TopicSpec, receipts: list[tuple[int, int]]
    ) -> dict[int, MessagingError]:
        """Acknowledge (queue id, queue offset) deliveries of one topic, as ``ack`` does
        each, committing each queue once; returns the failures by index."""
        failed: dict[int, MessagingError] = {}
        touched: dict[int, QueueConsumeState] = {}
        trace = self.trace
        for i, (qid, offset) in enumerate(receipts):
            state = touched.get(qid)
            if state is None:
                if not 0 <= qid < topic.queues:
                    failed[i] = MessagingError(
                        Code.INVALID_RECEIPT_HANDLE,
                        f"receipt names queue {qid} of topic {topic.name!r}, which has "
                        f"{topic.queues}",
                    )
                    continue
                state = touched[qid] = self.state(group, topic.name, qid)
            if offset >= state.next_offset:
                failed[i] = MessagingError(
                    Code.INVALID_RECEIPT_HANDLE, "receipt names a message never delivered"
                )
                continue
            state.mark_done(offset)
            if trace is not None:
                trace.acked((group, topic.name, qid, offset))
        for qid, state in touched.items():
            self._commit(group, topic.name, qid, state)
        return failed

    def change_invisible(self, group: str, topic: str, handle_text: str, invisible_ms: int) -> str:
        """Move the delivery's invisibility deadline; returns the new handle."""
        handle = self._handle(topic, handle_text)
        state = self.state(group, handle.topic, handle.queue_id)
        entry = state.inflight.get(handle.queue_offset)
        if entry is None or entry.nonce != handle.nonce:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE,
                "the delivery of this receipt handle is over (acknowledged, expired or "
                "delivered again)",
            )
        nonce = next(self._nonces)
        deadline = now_ms() + invisible_ms
        state.change_invisible(handle.queue_offset, deadline, nonce)
        key = (group, handle.topic, handle.queue_id)
        self._watch(key, handle.queue_offset, entry.attempt, deadline, nonce)
        return ReceiptHandle(
            handle.topic,
            handle.queue_id,
            handle.queue_offset,
            entry.attempt,
            nonce,
            deadline,
            self.broker_group,
        ).encode()

    async def forward_to_dead_letter(self, group: str, topic: str, handle_text: str) -> None:
        handle = self._handle(topic, handle_text)
        state = self.state(group, handle.topic, handle.queue_id)
        if handle.queue_offset < state.committed or handle.queue_offset in state.done:
            return  # already done: forwarding again would duplicate it
        entry = state.inflight.get(handle.queue_offset)
        cq = self._store.queues.get(handle.topic, handle.queue_id)
        cq_entry = None if cq is None else cq.get(handle.queue_offset)
        if entry is None or cq_entry is None:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE, "the message of this receipt handle is not in flight"
            )
        msg = self._store.read_message(cq_entry.physical_offset, cq_entry.size)
        key = (group, handle.topic, handle.queue_id)
        if not await self.dead_letter_now(key, state, handle.queue_offset, msg, entry.attempt):
            raise MessagingError(
                Code.INTERNAL_SERVER_ERROR, "writing the dead letter failed; retry shortly"
            )

    def release_client(self, client_id: str) -> int:
        """The client said goodbye or expired: its deliveries are visible again (a last
        attempt goes to the DLQ at once)."""
        count = 0
        for key, state in self._states.items():
            for offset in state.release_client(client_id):
                self._watch(key, offset, state.waiting.get(offset, 0), 0, -1)
                count += 1
        return count

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        lo, hi = self._store.queue_offsets(topic, queue_id)
        if not lo <= offset <= hi:
            raise MessagingError(Code.ILLEGAL_OFFSET, f"offset {offset} outside [{lo}, {hi}]")
        state = self.state(group, topic, queue_id)
        state.reset_to(offset)
        self._store.metadata.commit_offset(group, topic, queue_id, offset)

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._states if k[0] == group]:
            del self._states[key]
            if self.master:
                self.journal.append(key, ["X"])
        self._store.metadata.put_values(
            {k: None for k in self._store.metadata.values_with_prefix(f"{STATE_PREFIX}{group}/")}
        )

    # -- upkeep ----------------------------------------------------------------

    def renew(self, alive: set[str]) -> None:
        now = now_ms()
        for key, state in self._states.items():
            if state.inflight:
                for offset in state.renew(now, self._tuning.auto_renew_invisible_ms, alive):
                    self._watch(key, offset, state.waiting.get(offset, 0), 0, -1)

    def persist(self) -> int:
        """Write every changed state and the journal position in one transaction;
        returns how many states. Not while rebuilding: half-rebuilt states are not
        saved (a restart then finds the old position cut off and rebuilds again)."""
        if self.replayer.rebuilding:
            return 0
        dirty = {k: s for k, s in self._states.items() if s.dirty}
        position = self.replayer.position.to_json()
        saved = self._saved_position
        if not dirty and position == saved:
            return 0
        values: dict[str, object] = {_state_key(k): s.snapshot() for k, s in dirty.items()}
        values[POSITION_KEY] = position
        self._saved_position = position
        self._store.metadata.put_values(values)
        for state in dirty.values():
            state.dirty = False
        self._store.metadata.persist_offsets()
        return len(dirty)


def _wanted(msg: StoredMessage, message_filter: MessageFilter, group: str) -> bool:
    """Whether a new message of the queue is delivered to ``group``: its filter matches,
    and it is not a dead letter resent for another group only (dead_letters.py), which
    every other group skips as filtered out."""
    props = msg.properties
    resent_for = props.get(prop.RESEND_GROUP)
    if resent_for is not None and resent_for != group:
        return False
    return message_filter.matches(msg.tag, props)


def _state_key(key: StateKey) -> str:
    group, topic, qid = key
    return f"{STATE_PREFIX}{group}/{topic}/{qid}"
