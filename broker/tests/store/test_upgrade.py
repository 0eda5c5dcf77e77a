"""A store written by the release before the consume-queue database (a preallocated
file per queue) opens with it: the old files are gone, the queues rebuilt from the
commit log, every message readable at its queue offset, every consumer offset kept.

``data/store-before-cq-database.tar.gz`` was written by that release (commit a61208f)
with ``small_store_config``: 300 messages over 3 topics x 4 queues, two committed
offsets, closed cleanly; ``expected.json`` in it lists each queue's bodies in order."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.consumequeue import DATABASE_NAME

from .conftest import message, small_config

ARCHIVE = Path(__file__).parent / "data" / "store-before-cq-database.tar.gz"


def _unpack(into: Path) -> dict[str, list[str]]:
    into.mkdir(parents=True)
    with tarfile.open(ARCHIVE) as archive:
        # Python 3.11.2 (Debian's) has no extraction filters: the members are checked
        # here instead (plain files and directories inside ``into``).
        for member in archive.getmembers():
            inside = (into / member.name).resolve().is_relative_to(into.resolve())
            assert inside and (member.isfile() or member.isdir()), member.name
        archive.extractall(into)
    expected: dict[str, list[str]] = json.loads((into / "expected.json").read_text())
    return expected


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[str]:
    lo, hi = store.queue_offsets(topic, queue_id)
    got = store.get_messages(topic, queue_id, lo, hi - lo + 1).messages
    assert [m.queue_offset for m in got] == list(range(lo, hi))
    return [m.body.decode() for m in got]


async def test_a_store_of_the_previous_release_opens_with_every_message(tmp_path: Path) -> None:
    root = tmp_path / "store"
    expected = _unpack(root)
    assert (root / "consumequeue" / "topic-0" / "1").is_dir()  # the old layout
    store = await MessageStore.open(small_config(root))
    try:
        warnings = store.recovery.warnings
        assert any("old layout (3 topic directories" in w for w in warnings), warnings
        assert sorted(p.name for p in (root / "consumequeue").iterdir() if p.is_dir()) == []
        assert (root / "consumequeue" / DATABASE_NAME).is_file()
        for key, bodies in expected.items():
            topic, queue_id = key.split("/")
            assert _bodies(store, topic, int(queue_id)) == bodies, key
        assert store.metadata.get_offset("billing", "topic-0", 1) == 7
        assert store.metadata.get_offset("billing", "topic-2", 3) == 25
        # and it goes on: the next message of a queue takes the next offset
        before = store.queue_offsets("topic-1", 2)[1]
        result = await store.put(message(1002, topic="topic-1", queues=1000))  # queue 2
        assert result.ok and result.records[0].queue_offset == before
    finally:
        await store.close()
    again = await MessageStore.open(small_config(root))
    try:
        assert not again.recovery.warnings, again.recovery.warnings
        for key, bodies in expected.items():
            topic, queue_id = key.split("/")
            assert _bodies(again, topic, int(queue_id))[: len(bodies)] == bodies, key
        assert again.queue_offsets("topic-1", 2)[1] == before + 1
    finally:
        await again.close()
