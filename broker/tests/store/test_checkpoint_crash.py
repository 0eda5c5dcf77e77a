"""A writer process killed at every step of a checkpoint (``checkpoint_crash_child.py``:
before the consume queues' flush, inside its SQLite transaction before the commit,
before the index sync, before the consumer offsets, before the checkpoint file, after
the file's .tmp is written but before its rename, after the checkpoint): recovery
serves every acknowledged message at the queue offset it was acknowledged with, each
queue without gap or duplicate; a consumer offset is the one committed before either
checkpoint, never anything else; and the store goes on where it stopped (issue #27:
"crash at every step of a checkpoint")."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageStore
from rocketcluster.ctl.testing import small_store_config

from . import checkpoint_crash_child as child

CHILD = Path(child.__file__)
KILLED = 137
# The crash is a process's (kill -9), not the machine's: the page cache survives it, so
# the store may live in memory, where a synced put costs no disk flush.
RAM = Path("/dev/shm")


@pytest.fixture
def store_root(tmp_path: Path) -> Iterator[Path]:
    if not RAM.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=RAM, prefix="checkpoint-crash-") as directory:
        yield Path(directory)


def _crash(root: Path, step: str, record: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root), step, str(record)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == KILLED, (
        f"{step}: the writer exited {done.returncode}, not killed at the step\n{done.stderr}"
    )


@pytest.mark.parametrize("step", child.STEPS)
def test_a_crash_at_each_step_of_a_checkpoint_loses_nothing_acknowledged(
    store_root: Path, step: str
) -> None:
    root, record = store_root / "store", store_root / "acked.json"
    _crash(root, step, record)
    acked = [tuple(a) for a in json.loads(record.read_text())["acked"]]
    assert len(acked) == child.FIRST + child.SECOND

    async def check() -> None:
        store = await MessageStore.open(small_store_config(root))
        try:
            for queue_id in range(child.QUEUES):
                lo, hi = store.queue_offsets(child.TOPIC, queue_id)
                got = store.get_messages(child.TOPIC, queue_id, lo, hi - lo + 1).messages
                ours = sorted((off, mid) for mid, q, off in acked if q == queue_id)
                assert [(m.queue_offset, m.msg_id) for m in got] == ours, (step, queue_id)
                committed = store.metadata.get_offset(child.GROUP, child.TOPIC, queue_id)
                assert committed in (child.OFFSETS_BEFORE, child.OFFSETS_AFTER), (step, committed)
                if step in ("before-checkpoint-file", "checkpoint-file-before-rename"):
                    assert committed == child.OFFSETS_AFTER  # persisted before the file
            # It goes on where it stopped: the next message of each queue follows.
            for i in range(child.QUEUES):
                result = await store.put(child.message(10_000 + i))
                expected = max(off for _, q, off in acked if q == i % child.QUEUES) + 1
                assert result.records[0].queue_offset == expected, step
        finally:
            await store.close()

    asyncio.run(check())
