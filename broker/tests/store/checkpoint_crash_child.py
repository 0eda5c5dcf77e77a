"""The writer process of ``test_checkpoint_crash.py``: run as a script, it dies with
``os._exit(137)`` at one step of a checkpoint — as kill -9 would, nothing flushed or
closed after that point.

It fills a store, commits consumer offsets, takes a whole checkpoint, then writes and
commits more, records what was acknowledged (synced puts) in ``RECORD``, and takes a
second checkpoint that dies at ``STEP`` (one of :data:`STEPS`). Exit 137: it died
there; anything else: the step was never reached (the test fails).

    python checkpoint_crash_child.py STORE_DIR STEP RECORD
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocketcluster.broker.store import MessageStore, MessageToStore
from rocketcluster.broker.store import files as store_files
from rocketcluster.broker.store.checkpoint import StoreCheckpoint
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable
from rocketcluster.broker.store.index import IndexService
from rocketcluster.broker.store.metadata import MetadataStore
from rocketcluster.ctl.testing import small_store_config

TOPIC = "orders"
QUEUES = 3
GROUP = "readers"
FIRST, SECOND = 120, 120  # messages before the whole checkpoint, and after it
OFFSETS_BEFORE, OFFSETS_AFTER = 10, 30  # committed before each checkpoint
BATCH = 8  # messages a synced put

# A checkpoint's steps in order (Housekeeping.checkpoint): the consume queues' flush
# (one SQLite transaction), the index's sync, the consumer offsets (one LMDB
# transaction), the checkpoint file (written to .tmp, fsynced, renamed).
STEPS = (
    "before-queue-flush",
    "queue-flush-before-commit",
    "before-index-sync",
    "before-offsets",
    "before-checkpoint-file",
    "checkpoint-file-before-rename",
    "after-checkpoint",
)


def die() -> None:
    os._exit(137)


class _CommitKills:
    """The consume-queue database's writer connection, except that its COMMIT kills
    the process: the transaction's rows are written to SQLite's journal, not committed."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().upper() == "COMMIT":
            die()
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _before(cls: type, name: str) -> None:
    def dying(*_: Any, **__: Any) -> None:
        die()

    setattr(cls, name, dying)


@contextmanager
def crash_at(step: str, store: MessageStore) -> Iterator[None]:
    replace: Callable[..., None] = os.replace

    def replace_or_die(src: Any, dst: Any, **kwargs: Any) -> None:
        if Path(dst).name == store.config.checkpoint_path.name:
            die()
        replace(src, dst, **kwargs)

    if step == "before-queue-flush":
        _before(ConsumeQueueTable, "flush")
    elif step == "queue-flush-before-commit":
        database = store.queues.database
        database._writer = _CommitKills(database._writer)  # type: ignore[assignment]
    elif step == "before-index-sync":
        _before(IndexService, "sync")
    elif step == "before-offsets":
        _before(MetadataStore, "persist_offsets")
    elif step == "before-checkpoint-file":
        _before(StoreCheckpoint, "save")
    elif step == "checkpoint-file-before-rename":
        os.replace = replace_or_die  # the checkpoint's rename; other renames pass
    elif step != "after-checkpoint":
        raise SystemExit(f"unknown step {step!r}: one of {', '.join(STEPS)}")
    yield
    if step == "after-checkpoint":
        die()


def message(i: int) -> MessageToStore:
    return MessageToStore.build(TOPIC, i % QUEUES, f"body-{i}".encode(), msg_id=f"ID{i:030d}")


async def run(root: Path, step: str, record: Path) -> None:
    # Checkpoints only when this script takes them (not the housekeeping timer).
    store = await MessageStore.open(small_store_config(root, checkpoint_interval_ms=3_600_000))
    acked: list[tuple[str, int, int]] = []

    async def put(start: int, count: int) -> None:
        for first in range(start, start + count, BATCH):
            batch = [message(i) for i in range(first, min(first + BATCH, start + count))]
            result = await store.put_batch(batch)  # acknowledged: synced
            assert result.ok, result
            for msg, appended in zip(batch, result.records, strict=True):
                acked.append((msg.msg_id, msg.queue_id, appended.queue_offset))

    await put(0, FIRST)
    for queue_id in range(QUEUES):
        store.metadata.commit_offset(GROUP, TOPIC, queue_id, OFFSETS_BEFORE)
    await store.checkpoint()
    await put(FIRST, SECOND)
    for queue_id in range(QUEUES):
        store.metadata.commit_offset(GROUP, TOPIC, queue_id, OFFSETS_AFTER)
    store_files.write_atomically(record, json.dumps({"acked": acked}).encode())
    with crash_at(step, store):
        await store.checkpoint()
    raise SystemExit(f"{step}: the checkpoint finished without reaching the crash")


if __name__ == "__main__":
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
