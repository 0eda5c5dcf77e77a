"""StoreCheckpoint: how far the commit log and its derived data are known durable.

``commitlog_flushed``: every record below it was fsynced. ``logics_flushed``: every
consume-queue and index entry for records below it was flushed. Recovery scans the
commit log from ``min(commitlog_flushed, logics_flushed)`` and re-dispatches from
``logics_flushed``. The file is replaced atomically, so it is either old or new.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rocketcluster.broker.store.files import write_atomically


@dataclass(frozen=True, slots=True)
class StoreCheckpoint:
    commitlog_flushed: int
    logics_flushed: int
    clean_shutdown: bool
    written_at: float
    segment_size: int

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self), indent=2).encode())

    @classmethod
    def load(cls, path: Path) -> StoreCheckpoint | None:
        """The saved checkpoint, None when there is none. A file that cannot be read
        raises ValueError so the caller can quarantine it and scan everything."""
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(
            commitlog_flushed=int(raw["commitlog_flushed"]),
            logics_flushed=int(raw["logics_flushed"]),
            clean_shutdown=bool(raw["clean_shutdown"]),
            written_at=float(raw["written_at"]),
            segment_size=int(raw["segment_size"]),
        )

    @classmethod
    def now(
        cls, commitlog_flushed: int, logics_flushed: int, clean: bool, segment_size: int
    ) -> StoreCheckpoint:
        return cls(commitlog_flushed, logics_flushed, clean, time.time(), segment_size)
