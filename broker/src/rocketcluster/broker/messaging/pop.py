"""PopService: POP-style consumption for every consumer group on this broker.

Receive picks messages from the group's queues (expired deliveries first, then new
ones), makes them invisible for the requested duration and hands out receipt
handles; ack marks them done and moves the group's committed offset; an expired or
nacked delivery comes back with ``delivery_attempt + 1``; after the group's maximum
attempts the message goes to ``%DLQ%<group>`` instead. State changes are persisted
every ``consume_state_persist_ms``: after a crash, deliveries that were in flight are
redelivered (at-least-once) and nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.filters import MessageFilter
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.receipt import (
    InvalidReceiptHandle,
    ReceiptHandle,
    decode_handle,
)
from rocketcluster.broker.stats.reads import ReadRecorder
from rocketcluster.broker.store import MessageStore, StoredMessage
from rocketcluster.broker.store.consumequeue import ConsumeQueue

log = logging.getLogger(__name__)

SCAN_LIMIT = 1024  # entries looked at per queue per receive (filters skip the rest)
RECHECK_SECONDS = 0.5  # long polls re-check for expired deliveries this often
DLQ_TRANSIT_MS = 60_000

DeadLetterWriter = Callable[[str, StoredMessage, int], Awaitable[bool]]
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
    handle: str
    attempt: int
    invisible_ms: int


class PopService:
    def __init__(
        self,
        store: MessageStore,
        notifier: ArrivalNotifier,
        tuning: MessagingTuning,
        dead_letter: DeadLetterWriter,
        reads: ReadRecorder | None = None,
    ) -> None:
        self._store = store
        # When consumers were last served, per queue and segment (stats snapshots).
        self._reads = reads
        self._notifier = notifier
        self._tuning = tuning
        self._dead_letter = dead_letter
        self._states: dict[StateKey, QueueConsumeState] = {}
        self._rotation: dict[tuple[str, str], int] = {}
        # Nonces only need to differ between deliveries; starting from the clock keeps
        # them distinct across restarts too.
        self._nonces = itertools.count(time.time_ns() // 1000)
        self._persisted: dict[StateKey, float] = {}
        # Tiered storage, when enabled: messages local retention removed (or, by the
        # read policy, ones it did not) are read from the tier.
        self.cold: ColdReads | None = None

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
        lo, _ = self._store.queue_offsets(topic, queue_id)
        state.advance_to(lo)
        return state

    def reset(self) -> None:
        """Forget in-memory consume state (a broker that just became master starts from
        the offsets its old master replicated to it)."""
        self._states.clear()

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
    ) -> list[Delivery]:
        """Deliver up to ``batch_size`` messages, long-polling up to ``wait_seconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        if auto_renew:
            invisible_ms = self._tuning.auto_renew_invisible_ms
        while True:
            queues = self._queues_to_try(group.name, topic, queue_id)
            out: list[Delivery] = []
            for qid in queues:
                if len(out) >= batch_size:
                    break
                out += await self._pop_queue(
                    group,
                    topic.name,
                    qid,
                    message_filter,
                    batch_size - len(out),
                    invisible_ms,
                    auto_renew,
                    client_id,
                )
            if out:
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
    ) -> list[Delivery]:
        state = self.state(group.name, topic, qid)
        now = now_ms()
        if group.fifo and state.blocked_for_fifo(now):
            return []
        store = self._store
        cq = store.queues.get(topic, qid)
        if cq is None:
            return []
        clog_min = store.commitlog.min_offset
        out: list[Delivery] = []
        to_dead_letter: list[tuple[int, StoredMessage, int]] = []

        def deliver(offset: int, msg: StoredMessage, attempt: int) -> None:
            nonce = next(self._nonces)
            deadline = now + invisible_ms
            state.deliver(offset, attempt, deadline, nonce, client_id, auto_renew)
            handle = ReceiptHandle(topic, qid, offset, attempt, nonce, deadline).encode()
            out.append(Delivery(msg, handle, attempt, invisible_ms))

        for offset, attempts in state.redeliverable(now):
            if len(out) >= limit:
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
            if attempts >= group.max_delivery_attempts:
                state.deliver(offset, attempts, now + DLQ_TRANSIT_MS, next(self._nonces))
                to_dead_letter.append((offset, msg, attempts))
                continue
            deliver(offset, msg, attempts + 1)

        scanned = 0
        while len(out) < limit and state.next_offset < cq.max_index and scanned < SCAN_LIMIT:
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
                    if not message_filter.matches(msg.tag, msg.properties):
                        state.skip_new(msg.queue_offset)
                        continue
                    deliver(msg.queue_offset, msg, 1)
                    if len(out) >= limit:
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
                if not message_filter.matches(msg.tag, msg.properties):
                    state.skip_new(offset)
                    continue
                deliver(offset, msg, 1)
                if len(out) >= limit:
                    break
        if out and self._reads is not None:  # once per batch (DESIGN §9)
            first, last = out[0].message.physical_offset, out[-1].message.physical_offset
            self._reads.served(topic, qid, first, last, now)
        self._commit(group.name, topic, qid, state)
        for offset, msg, attempts in to_dead_letter:
            if await self._dead_letter(group.name, msg, attempts):
                state.mark_done(offset)
                self._commit(group.name, topic, qid, state)
            else:
                state.make_visible(offset)  # retried on a later receive
        return out

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
        return ReceiptHandle(
            handle.topic, handle.queue_id, handle.queue_offset, entry.attempt, nonce, deadline
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
        if not await self._dead_letter(group, msg, entry.attempt):
            raise MessagingError(Code.INTERNAL_SERVER_ERROR, "writing the dead letter failed")
        state.mark_done(handle.queue_offset)
        self._commit(group, handle.topic, handle.queue_id, state)

    def release_client(self, client_id: str) -> int:
        return sum(state.release_client(client_id) for state in self._states.values())

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
        self._store.metadata.put_values(
            {k: None for k in self._store.metadata.values_with_prefix(f"pop/{group}/")}
        )

    # -- upkeep ----------------------------------------------------------------

    def renew(self, alive: set[str]) -> None:
        now = now_ms()
        for state in self._states.values():
            if state.inflight:
                state.renew(now, self._tuning.auto_renew_invisible_ms, alive)

    def persist(self) -> int:
        """Write every changed state in one transaction; returns how many."""
        dirty = {k: s for k, s in self._states.items() if s.dirty}
        if not dirty:
            return 0
        self._store.metadata.put_values({_state_key(k): s.snapshot() for k, s in dirty.items()})
        for state in dirty.values():
            state.dirty = False
        self._store.metadata.persist_offsets()
        return len(dirty)


def _state_key(key: StateKey) -> str:
    group, topic, qid = key
    return f"pop/{group}/{topic}/{qid}"
