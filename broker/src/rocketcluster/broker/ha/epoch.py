"""EpochFileCache: which master epoch wrote which part of the log (pure + a file).

Each entry is (epoch, start offset): the master of ``epoch`` wrote from ``start`` on,
until the next entry's start. Comparing two tables finds the consistent point: the
newest epoch both logs share with the same start; what follows it in either log may
have diverged and is cut on the slave (RocketMQ's findConsistentPoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def end_of(entries: list[EpochEntry], i: int, max_offset: int) -> int:
    return entries[i + 1].start_offset if i + 1 < len(entries) else max_offset


def consistent_point(
    master: list[EpochEntry], master_max: int, slave: list[EpochEntry], slave_max: int
) -> int | None:
    """Where the slave's log stops agreeing with the master's, or None when the two
    logs share no epoch at all."""
    by_epoch = {e.epoch: i for i, e in enumerate(master)}
    for j in range(len(slave) - 1, -1, -1):
        entry = slave[j]
        i = by_epoch.get(entry.epoch)
        if i is None or master[i].start_offset != entry.start_offset:
            continue
        return min(end_of(master, i, master_max), end_of(slave, j, slave_max))
    return None


def epoch_at(entries: list[EpochEntry], offset: int) -> EpochEntry | None:
    """The entry whose range holds ``offset``."""
    found = None
    for entry in entries:
        if entry.start_offset <= offset:
            found = entry
        else:
            break
    return found


def next_boundary(entries: list[EpochEntry], offset: int) -> int | None:
    """The first epoch start after ``offset`` (batches must not cross it)."""
    for entry in entries:
        if entry.start_offset > offset:
            return entry.start_offset
    return None


class EpochFileCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []
        if path.exists():
            self.entries = [EpochEntry(int(e), int(s)) for e, s in json.loads(path.read_text())]

    def _save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as f:
            json.dump([list(e) for e in self.entries], f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` writes from ``start_offset`` (a new master's first act)."""
        last = self.last
        if last is not None:
            if epoch < last.epoch:
                raise ValueError(f"epoch {epoch} is older than the last one, {last.epoch}")
            if epoch == last.epoch:
                return
            if start_offset < last.start_offset:
                raise ValueError(f"epoch {epoch} starts at {start_offset}, before {last}")
            if start_offset == last.start_offset:
                self.entries.pop()  # the previous epoch wrote nothing
        self.entries.append(EpochEntry(epoch, start_offset))
        self._save()

    def truncate_from(self, offset: int) -> None:
        """Forget epochs that start at or after ``offset`` (their data is being cut)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def replace(self, entries: list[EpochEntry]) -> None:
        self.entries = list(entries)
        self._save()
