"""The POP journal: consumption state changes written to the commit log as data.

RocketMQ keeps POP state in its revive topic so that it is replicated like messages;
ours is the system topic ``RMQ_SYS_POP_JOURNAL`` (queue 0). The master records every
transition of a QueueConsumeState as an *op* and writes them, batched, as ordinary
commit-log records: replicated to the slaves, confirmed by the in-sync replicas,
fenced by epochs and trimmed by retention exactly like messages. A reply that reports
a consumption change (the receive's messages, the ack's OK) goes out only once its
record is stored and replicated as a send would be, so a failover cannot take it back.
Slaves apply the records as they are dispatched (pop_replay.py); ops carry absolute
deadlines, nonces and attempts, so applying them is deterministic.

Record body (JSON, one per write, several when large)::

    {"id": "<writer>-<seq>", "k": [[group, topic, queue], ...], "o": [[key index, op...], ...]}

Ops (the first element names the transition of QueueConsumeState)::

    ["D", offset, attempt, deadline_ms, nonce, client_id, auto_renew]  deliver
    ["K", offset]                    done (acked, dead-lettered)
    ["S", offset]                    a new message skipped (filtered, gone)
    ["I", offset, deadline_ms, nonce]   change_invisible
    ["E", offset, deadline_ms]       auto-renew extension
    ["V", offset]                    make_visible (nack, client gone)
    ["A", min_offset]                advance_to (retention)
    ["R", offset]                    reset_to (an operator moved the offset)
    ["Z", full snapshot]             the whole state (first change in a term, periodic)
    ["X"]                            the group was deleted: forget the state

A *checkpoint* is one write holding a ``Z`` op for every state the master has: its last
record carries the tag ``checkpoint`` (in the consume queue's tags code, so a reader
finds the latest one by scanning the queue backwards without reading bodies), and its
first record is the one whose id ends in ``.0``. Replaying from a checkpoint's first
record gives every state, so a replica that must rebuild (pop_replay.py) replays only
what follows the latest checkpoint instead of the whole retained journal.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rocketcluster.broker.messaging.consume_state import Op, QueueConsumeState
from rocketcluster.broker.store import AppendedRecord, MessageToStore, PutResult, PutStatus

log = logging.getLogger(__name__)

JOURNAL_TOPIC: Final = "RMQ_SYS_POP_JOURNAL"
JOURNAL_QUEUE: Final = 0
RECORD_BODY_LIMIT: Final = 256 << 10  # split larger writes into several records
CHECKPOINT_TAG: Final = "checkpoint"  # on the last record of a checkpoint's write

StateKey = tuple[str, str, int]
KeyedOp = tuple[StateKey, Op]
Put = Callable[[Sequence[MessageToStore]], Awaitable[PutResult]]


class JournalFormatError(ValueError):
    """A journal record that does not decode: skipped with a warning (never applied
    half), the next snapshot of its queues repairs them."""


# -- codec ----------------------------------------------------------------------------


def encode_records(
    record_id: str, ops: Sequence[KeyedOp], limit: int = RECORD_BODY_LIMIT
) -> list[bytes]:
    """``ops`` as one or more record bodies of about ``limit`` bytes at most (an op
    larger than that gets a record of its own)."""
    bodies: list[bytes] = []
    keys: dict[StateKey, int] = {}
    out: list[list[Any]] = []
    size = 0

    def close() -> None:
        nonlocal keys, out, size
        if out:
            body = {"id": f"{record_id}.{len(bodies)}", "k": [list(k) for k in keys], "o": out}
            bodies.append(json.dumps(body, separators=(",", ":")).encode())
        keys, out, size = {}, [], 0

    for key, op in ops:
        cost = len(op) * 12 + (len(json.dumps(op[1])) if op[0] == "Z" else 0)
        if out and size + cost > limit:
            close()
        index = keys.setdefault(key, len(keys))
        out.append([index, *op])
        size += cost
    close()
    return bodies


def record_part(record_id: str) -> tuple[str, int]:
    """A record id as (the write's id, the record's number within the write)."""
    write, sep, part = record_id.rpartition(".")
    if not sep or not part.isdigit():
        raise JournalFormatError(f"POP journal record id {record_id!r} names no part")
    return write, int(part)


def decode_record(body: bytes) -> tuple[str, list[KeyedOp]]:
    try:
        data = json.loads(body)
        keys = [(str(g), str(t), int(q)) for g, t, q in data["k"]]
        return str(data["id"]), [(keys[int(o[0])], list(o[1:])) for o in data["o"]]
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise JournalFormatError(f"POP journal record does not decode: {exc}") from exc


def apply_op(state: QueueConsumeState, op: Op) -> None:
    """Apply one recorded transition (a slave replaying, a broker recovering)."""
    kind = op[0]
    if kind == "D":
        _, offset, attempt, deadline, nonce, client, auto = op
        state.deliver(offset, attempt, deadline, nonce, client, bool(auto))
    elif kind == "K":
        state.mark_done(op[1])
    elif kind == "S":
        state.skip_new(op[1])
    elif kind == "I":
        state.change_invisible(op[1], op[2], op[3])
    elif kind == "E":
        state.extend(op[1], op[2])
    elif kind == "V":
        state.make_visible(op[1])
    elif kind == "A":
        state.advance_to(op[1])
    elif kind == "R":
        state.reset_to(op[1])
    else:
        raise JournalFormatError(f"unknown POP journal op {kind!r}")


# -- writing ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalPosition:
    """Where a journal reader stands: the next queue offset to apply, and the record
    just before it (commit-log offset, size, id) to recognise a diverged log by."""

    next_index: int
    physical_offset: int = -1
    size: int = 0
    record_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "next": self.next_index,
            "phys": self.physical_offset,
            "size": self.size,
            "id": self.record_id,
        }

    @classmethod
    def from_json(cls, data: object) -> JournalPosition | None:
        if not isinstance(data, dict):
            return None
        return cls(int(data["next"]), int(data["phys"]), int(data["size"]), str(data["id"]))


class PopJournalWriter:
    """Group commit for journal ops: every op appended while a write is under way
    goes into the next write, so concurrent acks (official clients ack one message
    per RPC) share one put and one replication wait.

    ``sync()`` resolves once everything appended before it is stored and replicated
    (or has failed: the result says which)."""

    def __init__(self, put: Put, *, writer: str, limit: int = RECORD_BODY_LIMIT) -> None:
        self._put = put
        self._limit = limit
        self._writer = writer
        self._ids = itertools.count()
        self._ops: list[KeyedOp] = []
        self._extra: list[MessageToStore] = []
        # The pending ops hold a checkpoint: the next write is tagged as one; and
        # whether the write under way is one.
        self._checkpoint = False
        self._checkpoint_writing = False
        self._appended = 0  # ops and extra records ever handed in
        self._written = 0  # of which finished writing (well or not)
        self._waiters: list[tuple[int, asyncio.Future[PutResult]]] = []
        self._busy = False  # a write is under way (inline or in the background task)
        self._scheduled = False
        self._task: asyncio.Task[None] | None = None
        # Called with the last journal record of every write that reached the log.
        self.on_written: Callable[[AppendedRecord, str], None] | None = None
        self.writes = 0
        self.ops_written = 0
        self.checkpoints = 0
        # Journal records written since the last checkpoint, and when the last one
        # failed to be written (PopService decides when the next one is due).
        self.records_since_checkpoint = 0
        self.checkpoint_failed_at: float | None = None

    def append(self, key: StateKey, op: Op) -> None:
        self._ops.append((key, op))
        self._appended += 1
        self._schedule()

    def _schedule(self) -> None:
        if not self._busy and not self._scheduled:  # written even if nobody waits
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start_background)

    def append_checkpoint(self, ops: Sequence[KeyedOp]) -> None:
        """Append every state's ``Z`` op; the write that takes them is tagged as a
        checkpoint (all pending ops go into one write, so it holds all of them). With
        no state at all it is one empty record: a rebuild starts there all the same."""
        for key, op in ops:
            self.append(key, op)
        if not ops:
            self._appended += 1  # the empty record, counted like an op
            self._schedule()
        self._checkpoint = True

    def _waiting(self) -> bool:
        return bool(self._ops or self._extra or self._checkpoint)

    @property
    def checkpoint_pending(self) -> bool:
        """A checkpoint waits to be written or is being written."""
        return self._checkpoint or self._checkpoint_writing

    def pending(self) -> int:
        return self._appended - self._written

    async def sync(self, extra: Sequence[MessageToStore] = ()) -> PutResult:
        """Wait for everything appended so far; ``extra`` records (a dead letter) are
        stored in the same atomic put as the ops appended with them.

        With no write under way the caller writes at once, in its own task (a lone
        ack pays no hand-over to another task); otherwise it waits for the next write,
        which takes whatever accumulated meanwhile."""
        if extra:
            self._extra.extend(extra)
            self._appended += len(extra)
        if self._appended == self._written:
            return PutResult(PutStatus.PUT_OK)
        if self._busy:
            fut: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
            self._waiters.append((self._appended, fut))
            return await fut
        self._busy = True
        try:
            result = await self._write_once()
        finally:
            self._busy = False
            if self._waiting():  # appended during the write: the next one
                self._start_background()
        return result

    def drop_pending(self, reason: str) -> None:
        """No longer master: ops not yet written cannot be (the store refuses them)."""
        self._ops, self._extra = [], []
        self._checkpoint = False
        self._written = self._appended
        self._resolve(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=reason))

    def _start_background(self) -> None:
        self._scheduled = False
        if not self._busy and self._waiting():
            self._busy = True
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="pop-journal")

    async def _drain(self) -> None:
        try:
            while self._waiting():
                await self._write_once()
        finally:
            self._busy = False

    async def _write_once(self) -> PutResult:
        """Write everything pending in one put; resolves the waiters it covers."""
        ops, extra, checkpoint = self._ops, self._extra, self._checkpoint
        self._ops, self._extra, self._checkpoint = [], [], False
        upto = self._appended
        record_id = f"{self._writer}-{next(self._ids)}"
        bodies = encode_records(record_id, ops, self._limit)
        if checkpoint and not bodies:
            bodies = [json.dumps({"id": f"{record_id}.0", "k": [], "o": []}).encode()]
        records = [
            MessageToStore.build(
                JOURNAL_TOPIC,
                JOURNAL_QUEUE,
                body,
                tag=CHECKPOINT_TAG if checkpoint and i == len(bodies) - 1 else None,
            )
            for i, body in enumerate(bodies)
        ]
        self._checkpoint_writing = checkpoint
        try:
            result = await self._put([*extra, *records])
        except asyncio.CancelledError:
            # The writing RPC was cancelled (its client went away): those it wrote for
            # must not wait forever; they learn the write's fate is unknown.
            self._written = max(self._written, upto)
            self._resolve(PutResult(PutStatus.UNKNOWN_ERROR, reason="POP journal write cancelled"))
            raise
        except Exception as exc:  # a failed write is an answer, not a crash
            log.exception("writing %d POP journal ops failed", len(ops))
            result = PutResult(PutStatus.UNKNOWN_ERROR, reason=f"POP journal: {exc}")
        finally:
            self._checkpoint_writing = False
        if result.records and records and self.on_written is not None:
            self.on_written(result.records[-1], f"{record_id}.{len(records) - 1}")
        if result.ok:
            self.writes += 1
            self.ops_written += len(ops)
            if checkpoint:
                self.checkpoints += 1
                self.records_since_checkpoint = 0
                self.checkpoint_failed_at = None
            else:
                self.records_since_checkpoint += len(records)
        elif checkpoint:
            self.checkpoint_failed_at = time.monotonic()
        if not result.ok and not result.records:
            log.warning("POP journal write refused: %s", result.reason)
        self._written = max(self._written, upto)
        self._resolve(result)
        return result

    def _resolve(self, result: PutResult) -> None:
        still = []
        for upto, fut in self._waiters:
            if upto <= self._written:
                if not fut.done():
                    fut.set_result(result)
            else:
                still.append((upto, fut))
        self._waiters = still


def writer_name() -> str:
    """Record ids only need to differ between writers and restarts."""
    return format(time.time_ns() // 1000, "x")
