"""Closing or abandoning a store while housekeeping flushes on its worker thread.

The periodic checkpoint flushes the consume queues on a worker thread; cancelling the
housekeeping task does not stop that thread. A store that then closed the consume-queue
database under the running transaction crashed the process (a segfault in SQLite,
seen in the crash-recovery property test), or the flush reopened the database after
the close. Here the flush is held on its thread until the store has begun to close:
the close must wait for it, and no flush may start afterwards."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageStore

from .conftest import message, small_config

HOLD_S = 0.3  # how long the first flush is held on its thread once the close began


class HeldFlush:
    """Wraps ``store.queues.flush``: the first call (the periodic checkpoint's, on its
    worker thread) waits until released; every call is written down as it starts and
    ends, with the thread it ran on."""

    def __init__(self, store: MessageStore) -> None:
        self.events: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self._real: Callable[[], int] = store.queues.flush
        self._loop_thread = threading.get_ident()

    def __call__(self) -> int:
        where = "loop" if threading.get_ident() == self._loop_thread else "worker"
        self.events.append(f"start {where}")
        if not self.started.is_set():
            self.started.set()
            assert self.release.wait(10), "the held flush was never released"
        written = self._real()
        self.events.append(f"done {where}")
        return written

    async def wait_held(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10), "no checkpoint flush ran"
        threading.Timer(HOLD_S, self.release.set).start()


async def _store_with_a_held_flush(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[MessageStore, HeldFlush]:
    store = await MessageStore.open(small_config(store_dir))
    held = HeldFlush(store)
    monkeypatch.setattr(store.queues, "flush", held)
    for i in range(30):
        assert (await store.put(message(i))).ok
    await held.wait_held()  # the periodic checkpoint (every 50 ms) is now on its thread
    return store, held


async def _all_readable(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        assert [store.queue_offsets("orders", q) for q in range(3)] == [(0, 10)] * 3
    finally:
        await store.close()


async def test_abandon_waits_for_the_flush_on_its_thread(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, held = await _store_with_a_held_flush(store_dir, monkeypatch)
    store.abandon()
    held.events.append("abandoned")
    assert held.events == ["start worker", "done worker", "abandoned"]
    await _all_readable(store_dir)


async def test_close_waits_for_the_flush_on_its_thread(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, held = await _store_with_a_held_flush(store_dir, monkeypatch)
    await store.close()
    # The close's own last flush (on the loop) only after the worker's has finished,
    # and no periodic flush after that.
    assert held.events == ["start worker", "done worker", "start loop", "done loop"]
    await _all_readable(store_dir)


async def test_no_flush_starts_once_the_store_is_abandoned(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await MessageStore.open(small_config(store_dir))
    assert (await store.put(message(0))).ok
    store.abandon()
    held = HeldFlush(store)
    held.started.set()  # nothing to hold: any call at all is the failure
    monkeypatch.setattr(store.queues, "flush", held)
    await store.checkpoint()  # what a housekeeping tick that was already due would do
    assert held.events == []
