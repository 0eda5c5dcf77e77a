"""SystemTopicLog: a service's own LMDB state plus its progress through a system
topic (the timer topic, the transaction half topic).

A service reads the topic's consume queue from its saved progress and turns each
record into state; progress and state change in one transaction, so a crash never
loses a record nor applies one twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb

from rocketcluster.broker.store import MessageStore, StoredMessage

PROGRESS_KEY = b"progress"


class SystemTopicLog:
    def __init__(self, directory: Path, topic: str, tables: list[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.env = lmdb.open(str(directory), map_size=1 << 30, max_dbs=len(tables) + 1)
        self.meta = self.env.open_db(b"meta")
        self.tables = {name: self.env.open_db(name.encode()) for name in tables}

    def progress(self) -> int:
        with self.env.begin(db=self.meta) as txn:
            raw = txn.get(PROGRESS_KEY)
        return 0 if raw is None else int(raw)

    def unread(self, store: MessageStore, limit: int = 512) -> tuple[list[StoredMessage], int]:
        """Records of the topic after the saved progress, and the progress after them."""
        cq = store.queues.get(self.topic, 0)
        start = self.progress()
        if cq is None:
            return [], start
        start = max(start, cq.min_index)
        entries = cq.entries(start, min(limit, cq.max_index - start))
        clog_min = store.commitlog.min_offset
        messages = [
            store.read_message(e.physical_offset, e.size)
            for e in entries
            if e.physical_offset >= clog_min
        ]
        return messages, start + len(entries)

    def close(self) -> None:
        self.env.close()


def dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def loads(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw)
    return value
