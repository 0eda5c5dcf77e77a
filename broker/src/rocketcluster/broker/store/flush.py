"""FlushCommitLogService: fdatasync on a thread of its own, group commit for sync flush.

Sync flush: every writer registers the offset it needs durable and waits; the flush
thread syncs everything written so far with one fdatasync and wakes every writer it
covered. While one fsync runs, the next batch of writers accumulates — that is the
group commit. Async flush: the thread syncs every ``flush_interval_ms`` or as soon as
``flush_bytes`` are unflushed.

An fsync error is fatal for the store (after a failed fsync the page cache cannot be
trusted to hold the data): waiters fail and the store stops accepting writes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable

from rocketcluster.broker.store.commitlog import CommitLog
from rocketcluster.broker.store.config import FlushMode

log = logging.getLogger(__name__)


class FlushFailedError(OSError):
    pass


class FlushTimeoutError(TimeoutError):
    pass


class FlushCommitLogService:
    def __init__(
        self,
        commitlog: CommitLog,
        loop: asyncio.AbstractEventLoop,
        *,
        mode: FlushMode,
        interval_ms: int,
        flush_bytes: int,
        on_flushed: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        timeout_ms: int = 5000,
    ) -> None:
        self._commitlog = commitlog
        self._loop = loop
        self._mode = mode
        self._interval = interval_ms / 1000
        self._flush_bytes = flush_bytes
        self._on_flushed = on_flushed
        self._on_failed = on_failed
        self._wakeup = threading.Event()
        self._stopping = False
        self._timeout = timeout_ms / 1000
        self._timeout_check: asyncio.TimerHandle | None = None
        # (offset, deadline, future), in offset order: appends are ordered.
        self._waiters: collections.deque[tuple[int, float, asyncio.Future[None]]] = (
            collections.deque()
        )
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.flushed_offset = commitlog.flushed_offset
        self.fsync_count = 0
        # Called on the flush thread with the seconds each flush (its fdatasync) took.
        self._timing_listeners: list[Callable[[float], None]] = []

    def add_timing_listener(self, listener: Callable[[float], None]) -> None:
        """``listener(seconds)`` after every flush that synced something: once per
        group commit, never per message. It runs on the flush thread; keep it cheap."""
        self._timing_listeners.append(listener)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="flush-commitlog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after a last flush of everything written; blocks until done."""
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.failure is None:
            self._sync(self._commitlog.commit())
            self._flushed(self._commitlog.flushed_offset)
        self._fail_waiters(self.failure or FlushFailedError("the store was closed"))

    # -- loop thread ---------------------------------------------------------

    def written(self) -> None:
        """Called after an append: wake the thread when a flush is due."""
        if self._mode is FlushMode.ASYNC:
            clog = self._commitlog
            if clog.write_offset - clog.flushed_offset >= self._flush_bytes:
                self._wakeup.set()

    def wait_flushed(self, offset: int) -> asyncio.Future[None]:
        """A future done once every byte below ``offset`` is durable; it fails with
        FlushTimeoutError after the sync flush timeout (one timer for all waiters)."""
        loop = self._loop
        fut: asyncio.Future[None] = loop.create_future()
        if self.failure is not None:
            fut.set_exception(FlushFailedError(str(self.failure)))
        elif offset <= self.flushed_offset:
            fut.set_result(None)
        else:
            self._waiters.append((offset, loop.time() + self._timeout, fut))
            if not self._wakeup.is_set():
                self._wakeup.set()
            if self._timeout_check is None:
                self._timeout_check = loop.call_later(self._timeout, self._expire_waiters)
        return fut

    def _expire_waiters(self) -> None:
        self._timeout_check = None
        now = self._loop.time()
        waiters = self._waiters
        while waiters and waiters[0][1] <= now:
            offset, _, fut = waiters.popleft()
            if not fut.done():
                fut.set_exception(FlushTimeoutError(f"fsync up to {offset} took too long"))
        if waiters:
            self._timeout_check = self._loop.call_at(waiters[0][1], self._expire_waiters)

    def _flushed(self, offset: int) -> None:
        self.flushed_offset = max(self.flushed_offset, offset)
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            fut = waiters.popleft()[2]
            if not fut.done():
                fut.set_result(None)
        self._on_flushed(offset)

    def _failed(self, exc: BaseException) -> None:
        self._fail_waiters(exc)
        self._on_failed(exc)

    def _fail_waiters(self, exc: BaseException) -> None:
        while self._waiters:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_exception(FlushFailedError(str(exc)))

    # -- flush thread --------------------------------------------------------

    def _run(self) -> None:
        commitlog = self._commitlog
        sync = self._mode is FlushMode.SYNC
        while not self._stopping:
            self._wakeup.wait(None if sync else self._interval)
            self._wakeup.clear()
            if self._stopping:
                break
            try:
                # Sync mode appends leave their bytes in memory: write them, then sync.
                target = commitlog.commit()
                if target <= commitlog.flushed_offset:
                    continue
                self._sync(target)
            except OSError as exc:
                log.critical("fdatasync of the commit log failed: %s; the store stops writes", exc)
                self.failure = exc
                self._loop.call_soon_threadsafe(self._failed, exc)
                return
            try:
                self._loop.call_soon_threadsafe(self._flushed, target)
            except RuntimeError:
                return  # the loop is closed: the store is going away

    def _sync(self, target: int) -> None:
        """fdatasync up to ``target`` and report how long it took (if it synced)."""
        commitlog = self._commitlog
        before = commitlog.flushed_offset
        started = time.perf_counter()
        commitlog.flush_to(target)
        if commitlog.flushed_offset <= before:
            return
        seconds = time.perf_counter() - started
        self.fsync_count += 1
        for listener in self._timing_listeners:
            try:
                listener(seconds)
            except Exception:
                log.exception("flush timing listener failed")
