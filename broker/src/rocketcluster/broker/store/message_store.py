"""MessageStore: the broker's durable store — commit log, consume queues, index,
metadata — behind one asyncio-facing object.

Writes: validate, append to the commit log (one pwrite per batch), then in sync-flush
mode wait for the group-commit fsync. Records become visible to consumers when they
are dispatched, which happens only up to the dispatch limit: the flushed offset in
sync mode (nothing a consumer saw can vanish in a crash), the written offset in async
mode, or the replication confirm offset once replication sets it.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rocketcluster.api.names import topic_name_problem
from rocketcluster.broker.store.checkpoint import StoreCheckpoint
from rocketcluster.broker.store.commitlog import AppendedRecord, CommitLog
from rocketcluster.broker.store.config import FlushMode, StoreConfig
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable
from rocketcluster.broker.store.dispatch import Dispatcher
from rocketcluster.broker.store.errors import (
    DiskFullError,
    GetStatus,
    OffsetRemovedError,
    PutStatus,
    StoreClosedError,
    StoreError,
    StoreLockedError,
)
from rocketcluster.broker.store.flush import FlushCommitLogService, FlushTimeoutError
from rocketcluster.broker.store.gate import WriteGate
from rocketcluster.broker.store.housekeeping import Housekeeping
from rocketcluster.broker.store.index import IndexService
from rocketcluster.broker.store.metadata import MetadataStore
from rocketcluster.broker.store.record import MessageToStore, StoredMessage
from rocketcluster.broker.store.recovery import RecoveryReport
from rocketcluster.broker.store.retention import RetentionDecision
from rocketcluster.broker.store.store_recovery import recover_store
from rocketcluster.broker.store.tier_view import TierView

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    records: list[AppendedRecord] = field(default_factory=list)
    reason: str = ""
    # The store time written into every record of the batch (0: nothing appended).
    store_timestamp: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


class MessageStore:
    """Open with ``await MessageStore.open(config)`` inside the event loop that uses it."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._closed = True
        self._released = False
        self._failure: BaseException | None = None
        self._lock_fd = -1
        self.recovery: RecoveryReport = RecoveryReport()
        # Filled in by open():
        self.commitlog: CommitLog
        self.queues: ConsumeQueueTable
        self.index: IndexService
        self.metadata: MetadataStore
        self._dispatcher: Dispatcher
        self._flush: FlushCommitLogService
        self._housekeeping: Housekeeping
        self._valid_topics: set[str] = set()
        self._dispatch_scheduled = False
        self._dispatch_listeners: list[Callable[[set[str]], None]] = []
        self._write_listeners: list[Callable[[], None]] = []
        self._confirm_offset: int | None = None
        # Replication: only the master writes; a slave's log grows by append_replicated.
        self.writable = True
        # A master handing its role over pauses every append here (ha/handover.py).
        self.write_gate = WriteGate()
        # Sync flush: the flush thread writes and fsyncs each group commit in one go.
        self._defer_writes = config.flush is FlushMode.SYNC
        self.disk_used_ratio = 0.0
        self.disk_total_bytes = 0
        self.tier: TierView | None = None
        # The broker's own bookkeeping topics (POP journal, traces, stats): retention
        # neither keeps them for consumers nor counts them as deleted unconsumed.
        self.bookkeeping_topics: frozenset[str] = frozenset()
        # topic -> consumer groups subscribed to it now (the broker's live consumers):
        # a subscribed group with no offset yet still needs the topic from its start.
        self.subscribers: Callable[[], Mapping[str, set[str]]] = dict

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    async def open(cls, config: StoreConfig) -> MessageStore:
        store = cls(config)
        store._open()
        return store

    def _open(self) -> None:
        cfg = self.config
        cfg.root_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            started = time.monotonic()
            recovered = recover_store(cfg)
            self.commitlog = recovered.commitlog
            self.queues = recovered.queues
            self.index = recovered.index
            self.recovery = recovered.report
            self.metadata = MetadataStore(cfg.metadata_dir)
            self._dispatcher = Dispatcher(
                self.queues, self.index, self.commitlog.write_offset, self._notify_dispatched
            )
            self.recovery.seconds = time.monotonic() - started
            self.write_checkpoint(clean=False)
        except BaseException:
            self._unlock()
            raise
        loop = asyncio.get_running_loop()
        self._flush = FlushCommitLogService(
            self.commitlog,
            loop,
            mode=cfg.flush,
            interval_ms=cfg.flush_interval_ms,
            flush_bytes=cfg.flush_bytes,
            on_flushed=self._on_flushed,
            on_failed=self._on_flush_failed,
            timeout_ms=cfg.sync_flush_timeout_ms,
        )
        self._flush.start()
        self.commitlog.page_cache.probe(self._lock_fd)  # same volume as the log
        self.index.start(self.commitlog.write_offset)
        self._housekeeping = Housekeeping(self)
        self.refresh_disk_usage()
        self._housekeeping.start()
        self._closed = False
        log.info(
            "store %s open: offsets [%d, %d), %d consume queues, recovery %.3fs (%s)",
            cfg.root_dir,
            self.commitlog.min_offset,
            self.commitlog.write_offset,
            len(self.queues),
            self.recovery.seconds,
            self.recovery.stop_reason,
        )

    def _lock(self) -> None:
        fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreLockedError(str(self.config.root_dir), f"pid {holder}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    async def close(self) -> None:
        """Flush everything, write a clean checkpoint and release the directory."""
        if self._closed:
            return
        self._closed = True
        await self._housekeeping.stop()
        self._flush.stop()
        if self._failure is None:
            self._dispatch_now()
            self.write_checkpoint(clean=True, logics=self._flush_logics())
        self._release()

    def abandon(self) -> None:
        """Drop everything without flushing or checkpointing: what a crash leaves
        behind (the page cache still holds written bytes). For tests and tools."""
        if self._closed:
            return
        self._closed = True
        self._housekeeping.abandon()
        self._flush.failure = self._flush.failure or StoreClosedError()
        self._flush.stop()
        self.index.stop(drain=False)
        self._release()

    def _release(self) -> None:
        self._released = True
        for closer in (
            self.queues.close,
            self.index.close,
            self.metadata.close,
            self.commitlog.close,
        ):
            try:
                closer()
            except Exception:
                log.exception("closing the store")
        self._unlock()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writing ---------------------------------------------------------------

    async def put(self, msg: MessageToStore) -> PutResult:
        return await self.put_batch((msg,))

    async def put_batch(
        self, msgs: Sequence[MessageToStore], *, bookkeeping: bool = False
    ) -> PutResult:
        """Store ``msgs`` atomically (all or none) and return once the flush policy is
        met. Expected failures are statuses, never exceptions. ``bookkeeping``: records
        the broker makes to keep its own state (the POP journal, so acks go on while
        the disk is full) may use the room above ``disk_full_ratio``; only a disk that
        is really out of space refuses them."""
        if self.write_gate.closed:
            # Nothing may reach the log while a handover has it final; no await between
            # the passage and the append below, so the gate cannot close in between.
            await self.write_gate.passage()
        refusal = self._refuse(msgs, bookkeeping)
        if refusal is not None:
            return refusal
        stamp = int(time.time() * 1000)
        try:
            appended = self.commitlog.append(msgs, stamp, defer_write=self._defer_writes)
        except DiskFullError as exc:
            self.refresh_disk_usage()
            return PutResult(PutStatus.DISK_FULL, reason=f"no space left: {exc}")
        except OSError as exc:
            log.exception("commit log write failed")
            return PutResult(PutStatus.UNKNOWN_ERROR, reason=f"commit log write failed: {exc}")
        self._dispatcher.add_batch(msgs, appended)
        for listener in self._write_listeners:
            listener()
        self._flush.written()
        if self.config.flush is FlushMode.SYNC:
            end = appended[-1].physical_offset + appended[-1].size
            try:
                await self._flush.wait_flushed(end)
            except FlushTimeoutError:
                return PutResult(
                    PutStatus.FLUSH_DISK_TIMEOUT, appended, "fsync did not finish in time", stamp
                )
            except OSError as exc:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, appended, str(exc), stamp)
        else:
            self._schedule_dispatch()
        return PutResult(PutStatus.PUT_OK, appended, store_timestamp=stamp)

    def _refuse(self, msgs: Sequence[MessageToStore], bookkeeping: bool) -> PutResult | None:
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="the store is closed")
        if self._failure is not None:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                reason=f"the store stopped writes after a disk error: {self._failure}",
            )
        if not self.writable:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE, reason="this broker is not its group's master"
            )
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason="no messages")
        cfg = self.config
        valid_topics = self._valid_topics
        max_body = cfg.max_message_bytes
        max_properties = cfg.max_properties_bytes
        for msg in msgs:  # per message: locals only, no attribute chains
            topic = msg.topic
            if topic not in valid_topics:
                problem = topic_name_problem(topic)
                if problem:
                    return PutResult(
                        PutStatus.MESSAGE_ILLEGAL, reason=f"topic {topic!r}: {problem}"
                    )
                valid_topics.add(topic)
            if len(msg.body) > max_body:
                return PutResult(
                    PutStatus.MESSAGE_ILLEGAL,
                    reason=f"body of {len(msg.body)} bytes exceeds the limit of {max_body}",
                )
            if len(msg.properties) > max_properties:
                return PutResult(
                    PutStatus.PROPERTIES_SIZE_EXCEEDED,
                    reason=f"properties of {len(msg.properties)} bytes exceed {max_properties}",
                )
            if not 0 <= msg.queue_id < 1 << 31:
                return PutResult(
                    PutStatus.MESSAGE_ILLEGAL, reason=f"invalid queue id {msg.queue_id}"
                )
        if self.disk_used_ratio > cfg.disk_full_ratio and not bookkeeping:
            return PutResult(
                PutStatus.DISK_FULL,
                reason=(
                    f"no space left: the broker's disk is {self.disk_used_ratio:.1%} full "
                    f"(writes stop at {cfg.disk_full_ratio:.0%}, diskFull: "
                    f"{cfg.disk_full.value}); retry later, writes resume when space returns"
                ),
            )
        return None

    async def flush(self) -> int:
        """Make everything written so far durable (whatever the flush mode); returns
        the flushed offset."""
        if self._closed:
            raise StoreClosedError()
        target = self.commitlog.write_offset
        await self._flush.wait_flushed(target)
        return self.commitlog.flushed_offset

    # -- dispatch --------------------------------------------------------------

    @property
    def dispatch_limit(self) -> int:
        if self._confirm_offset is not None:
            return self._confirm_offset
        if self.config.flush is FlushMode.SYNC:
            return self._flush.flushed_offset
        return self.commitlog.committed_offset

    def set_confirm_offset(self, offset: int | None) -> None:
        """Replication decides what consumers may see from here on (None: the flush
        policy decides again, as for a standalone broker)."""
        self._confirm_offset = offset
        self._schedule_dispatch()

    @property
    def confirm_offset(self) -> int | None:
        return self._confirm_offset

    @property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher

    @property
    def flush_service(self) -> FlushCommitLogService:
        return self._flush

    def _on_flushed(self, offset: int) -> None:
        if self.config.flush is FlushMode.SYNC:
            self._dispatch_now()

    def _on_flush_failed(self, exc: BaseException) -> None:
        self._failure = exc

    def _schedule_dispatch(self) -> None:
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch_now)

    def _dispatch_now(self) -> None:
        self._dispatch_scheduled = False
        if self._released:
            return
        dispatcher = self._dispatcher
        dispatcher.dispatch_until(self.dispatch_limit)
        if dispatcher.pending == 0 and dispatcher.stalled is None:
            dispatcher.dispatched_offset = min(self.commitlog.committed_offset, self.dispatch_limit)

    def add_write_listener(self, listener: Callable[[], None]) -> None:
        """``listener`` runs after every local append (replication wakes up)."""
        self._write_listeners.append(listener)

    def add_dispatch_listener(self, listener: Callable[[set[str]], None]) -> None:
        """``listener`` gets the topics of every dispatched batch (long polling)."""
        self._dispatch_listeners.append(listener)

    def _notify_dispatched(self, topics: set[str]) -> None:
        for listener in self._dispatch_listeners:
            try:
                listener(topics)
            except Exception:
                log.exception("dispatch listener failed")

    def retry_stalled_dispatch(self) -> None:
        if self._dispatcher.stalled is not None or self._dispatcher.pending:
            self._dispatch_now()

    @property
    def dispatched_offset(self) -> int:
        return self._dispatcher.dispatched_offset

    # -- reading ---------------------------------------------------------------

    def attach_tier(self, tier: TierView | None) -> None:
        """Tiered storage: retention keeps what is not uploaded, queues start where
        the tier starts, index entries stay while the tier holds their messages."""
        self.tier = tier

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) logical offsets visible to consumers of topic/queue_id (the min
        reaches into the tier when reads may be served from it)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0, 0
        tiered = None if self.tier is None else self.tier.queue_start(topic, queue_id)
        if tiered is not None and tiered < cq.min_index:
            return tiered, cq.max_index
        return cq.min_index, cq.max_index

    def offset_at_time(self, topic: str, queue_id: int, time_ms: int) -> int:
        """The first offset of topic/queue_id's local consume queue stored at or after
        ``time_ms``; its max offset when every message is older. Store times grow with
        the log, so a binary search over the consume queue finds it."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        first, last = cq.min_index, cq.max_index
        while first < last:
            mid = (first + last) // 2
            try:
                entry = cq.get(mid)
            except (StoreError, ValueError):  # the queue was deleted meanwhile
                entry = None
            stored = (
                None if entry is None else self.commitlog.store_timestamp(entry.physical_offset)
            )
            if stored is None or stored < time_ms:  # None: deleted, older than anything kept
                first = mid + 1
            else:
                last = mid
        return first

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        tags_filter: Callable[[int], bool] | None = None,
        message_filter: Callable[[StoredMessage], bool] | None = None,
        max_scan: int = 256,
    ) -> GetResult:
        """Messages of topic/queue_id from ``offset``; filters skip non-matching ones."""
        cq = self.queues.get(topic, queue_id)
        if cq is None or cq.max_index == cq.min_index == 0:
            status = (
                GetStatus.NO_MATCHED_LOGIC_QUEUE if cq is None else GetStatus.NO_MESSAGE_IN_QUEUE
            )
            return GetResult(status, [], 0 if cq is None else offset, 0, 0)
        lo, hi = cq.min_index, cq.max_index
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], hi, lo, hi)
        messages: list[StoredMessage] = []
        next_offset = offset
        scanned = 0
        clog_min = self.commitlog.min_offset
        while len(messages) < max_count and next_offset < hi and scanned < max_scan:
            entries = cq.entries(next_offset, min(max_scan - scanned, 64))
            if not entries:
                break
            for entry in entries:
                scanned += 1
                next_offset += 1
                if entry.physical_offset < clog_min:
                    continue
                if tags_filter is not None and not tags_filter(entry.tags_code):
                    continue
                msg = self.commitlog.read_message(
                    entry.physical_offset, entry.size, count_cache=True
                )
                if message_filter is not None and not message_filter(msg):
                    continue
                messages.append(msg)
                if len(messages) >= max_count:
                    break
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, lo, hi)

    def read_message(
        self, physical_offset: int, size: int, *, count_cache: bool = True
    ) -> StoredMessage:
        """One message; ``count_cache`` counts whether the page cache held it (off for
        reads that serve no client, such as a metrics scrape)."""
        return self.commitlog.read_message(physical_offset, size, count_cache=count_cache)

    def lookup_by_id(self, msg_id: str) -> list[StoredMessage]:
        """Messages with this message id (normally one), newest first."""
        self._catch_up_index()
        return self._verified(self.index.lookup_id(msg_id), lambda m: m.msg_id == msg_id)

    def lookup_by_key(self, topic: str, key: str, limit: int = 64) -> list[StoredMessage]:
        self._catch_up_index()
        return self._verified(
            self.index.lookup_key(topic, key, limit), lambda m: m.topic == topic and key in m.keys
        )

    def _catch_up_index(self) -> None:
        """Lookups answer for everything dispatched: wait (briefly) for the index
        writer to get there. Admin lookups are rare; the wait is milliseconds."""
        self.index.wait_indexed(self.dispatched_offset, timeout=2.0)

    def _verified(
        self, entries: Sequence[tuple[int, int]], matches: Callable[[StoredMessage], bool]
    ) -> list[StoredMessage]:
        found = []
        for phys, size in entries:
            if phys < self.commitlog.min_offset or phys + size > self.dispatched_offset:
                continue
            try:
                msg = self.commitlog.read_message(phys, size)
            except (OffsetRemovedError, StoreError):
                continue  # an entry left behind by a truncated tail or retention
            if matches(msg):
                found.append(msg)
        return found

    # -- housekeeping hooks ------------------------------------------------------

    def apply_retention(self, now: float | None = None) -> RetentionDecision:
        """Apply the retention policy now (it also runs periodically)."""
        return self._housekeeping.apply_retention(now)

    async def run_retention(self, now: float | None = None) -> RetentionDecision:
        """Apply the retention policy now as the periodic run does: the pass over every
        queue gives the event loop back a page at a time (``apply_retention``: all at
        once)."""
        return await self._housekeeping.apply_retention_paced(now)

    async def checkpoint(self) -> None:
        """Flush derived data and write the checkpoint now (it also runs periodically)."""
        await self._housekeeping.checkpoint()

    def refresh_disk_usage(self) -> None:
        """Re-read the volume's fill level (what retention and the disk-full refusal
        judge by)."""
        space = self.disk_space()
        if space is not None:
            avail, total = space
            self.disk_total_bytes = total
            self.disk_used_ratio = 1 - avail / total if total else 0.0

    def disk_space(self) -> tuple[int, int] | None:
        """(available, total) bytes of the store's volume now; available as an
        unprivileged writer sees it (``f_bavail``), which is what the store can still
        use. None if the volume cannot be asked."""
        try:
            st = os.statvfs(self.config.root_dir)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

    @property
    def retention_deleted_bytes(self) -> int:
        """Commit-log bytes retention removed since the store opened."""
        return self._housekeeping.deleted_bytes

    @property
    def deleted_unconsumed_messages(self) -> int:
        """Messages retention removed that no consumer group had consumed."""
        return self._housekeeping.deleted_unconsumed

    @property
    def retention_held_for_consumers(self) -> int:
        """Segments the last retention run kept, disk full or not, because consumer
        groups still need them (diskFull: reject)."""
        return self._housekeeping.held_for_consumers

    @property
    def retention_held_by_tier(self) -> int:
        """Segments the last retention run kept because the tier does not have all
        of them yet (disk pressure a tier outage causes)."""
        return self._housekeeping.held_by_tier

    def add_flush_timing_listener(self, listener: Callable[[float], None]) -> None:
        """``listener(seconds)`` after every commit-log flush (one fdatasync per group
        commit), on the flush thread."""
        self._flush.add_timing_listener(listener)

    def _flush_logics(self) -> int:
        """Flush consume queues and the index; returns the offset they cover."""
        covered = self._dispatcher.dispatched_offset
        self.queues.flush()
        self.index.stop()  # drains the writer's queue
        self.index.sync()
        return min(covered, self.index.indexed_offset)

    def write_checkpoint(self, *, clean: bool, logics: int | None = None) -> None:
        """Record what recovery may trust: the flushed log end, and the log offset the
        consume queues and index cover (``logics``; default: what is dispatched)."""
        flushed = self.commitlog.flushed_offset
        covered = self._dispatcher.dispatched_offset if logics is None else logics
        StoreCheckpoint.now(flushed, covered, clean, self.commitlog.segment_size).save(
            self.config.checkpoint_path
        )

    @property
    def failure(self) -> BaseException | None:
        return self._failure
