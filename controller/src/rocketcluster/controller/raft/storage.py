"""The core's read-only view of durable state, and an in-memory implementation.

The core never writes storage: writes leave through `Ready` and the driver applies them
(`MemoryStorage.append`, `set_hard_state`, `apply_snapshot`) once they are durable. That
way the same core runs over a file-backed log in production and over `MemoryStorage`
in tests and the simulator, where `MemoryStorage` plays the role of the disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rocketcluster.controller.raft.errors import (
    CompactedError,
    RaftInvariantError,
    SnapshotOutOfDateError,
    UnavailableError,
)
from rocketcluster.controller.raft.types import (
    EMPTY_HARD_STATE,
    EMPTY_SNAPSHOT,
    Entry,
    HardState,
    Snapshot,
    SnapshotMetadata,
)


class Storage(Protocol):
    """What the core may ask of durable state. All indexes are log indexes (from 1).

    Implementations raise `CompactedError` for indexes folded into the snapshot and
    `UnavailableError` for indexes past the end; anything else is fatal to the node.
    """

    def initial_state(self) -> HardState:
        """The last persisted hard state (term, vote, commit)."""
        ...

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        """Entries in [lo, hi), at least one if any, at most about `max_size` data bytes."""
        ...

    def term(self, index: int) -> int:
        """Term of the entry at `index`; valid from `first_index() - 1` (the snapshot)."""
        ...

    def first_index(self) -> int:
        """Index of the first entry still in the log (snapshot index + 1)."""
        ...

    def last_index(self) -> int:
        """Index of the last persisted entry (the snapshot index when the log is empty)."""
        ...

    def snapshot(self) -> Snapshot:
        """The most recent snapshot, for followers that fell behind the compacted log."""
        ...


def limit_size(entries: list[Entry], max_size: int | None) -> list[Entry]:
    """Trim `entries` to about `max_size` data bytes, always keeping the first one so
    replication makes progress even with an oversized entry."""
    if max_size is None or len(entries) <= 1:
        return entries
    size = len(entries[0].data)
    for n in range(1, len(entries)):
        size += len(entries[n].data)
        if size > max_size:
            return entries[:n]
    return entries


class MemoryStorage:
    """`Storage` held in memory, with the write side a driver uses after persisting.

    Invariant: `_ents[0]` is a dummy entry carrying the snapshot's index and term, so the
    term of the entry just before the first real one is always known (needed to match the
    `prev` of an AppendEntries right after the snapshot).
    """

    def __init__(self) -> None:
        self._hard_state = EMPTY_HARD_STATE
        self._snapshot = EMPTY_SNAPSHOT
        self._ents: list[Entry] = [Entry(term=0, index=0)]

    # --- the read side (Storage) -------------------------------------------------------

    def initial_state(self) -> HardState:
        return self._hard_state

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        offset = self._ents[0].index
        if lo <= offset:
            raise CompactedError(lo, offset + 1)
        if hi > self.last_index() + 1:
            raise UnavailableError(hi - 1, self.last_index())
        if len(self._ents) == 1:
            raise UnavailableError(lo, self.last_index())
        return limit_size(self._ents[lo - offset : hi - offset], max_size)

    def term(self, index: int) -> int:
        offset = self._ents[0].index
        if index < offset:
            raise CompactedError(index, offset + 1)
        if index - offset >= len(self._ents):
            raise UnavailableError(index, self.last_index())
        return self._ents[index - offset].term

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # --- the write side (used by the driver once data is durable) ----------------------

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    def set_hard_state(self, hard_state: HardState) -> None:
        self._hard_state = hard_state

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (a follower installing the leader's image)."""
        current = self._snapshot.metadata.index
        index = snapshot.metadata.index
        if index <= current:
            raise SnapshotOutOfDateError(index, current)
        self._snapshot = snapshot
        self._ents = [Entry(term=snapshot.metadata.term, index=index)]

    def create_snapshot(self, index: int, data: bytes) -> Snapshot:
        """Record the application's image as of `index` (which must be applied)."""
        current = self._snapshot.metadata.index
        if index <= current:
            raise SnapshotOutOfDateError(index, current)
        if index > self.last_index():
            raise UnavailableError(index, self.last_index())
        offset = self._ents[0].index
        meta = SnapshotMetadata(index=index, term=self._ents[index - offset].term)
        self._snapshot = Snapshot(metadata=meta, data=data)
        return self._snapshot

    def compact(self, compact_index: int) -> None:
        """Drop entries up to `compact_index`; a snapshot must already cover them."""
        offset = self._ents[0].index
        if compact_index <= offset:
            raise CompactedError(compact_index, offset + 1)
        if compact_index > self.last_index():
            raise UnavailableError(compact_index, self.last_index())
        if compact_index > self._snapshot.metadata.index:
            raise RaftInvariantError(
                "compact only what a snapshot covers",
                f"compact to {compact_index} but snapshot is at {self._snapshot.metadata.index}",
            )
        i = compact_index - offset
        head = Entry(term=self._ents[i].term, index=compact_index)
        self._ents = [head, *self._ents[i + 1 :]]

    def append(self, entries: Sequence[Entry]) -> None:
        """Append, truncating any conflicting suffix first (a new leader overwrote it)."""
        if not entries:
            return
        first = self.first_index()
        last = entries[0].index + len(entries) - 1
        if last < first:
            return
        if first > entries[0].index:
            entries = entries[first - entries[0].index :]
        offset = entries[0].index - self._ents[0].index
        if len(self._ents) > offset:
            self._ents = [*self._ents[:offset], *entries]
        elif len(self._ents) == offset:
            self._ents.extend(entries)
        else:
            raise RaftInvariantError(
                "append must be contiguous",
                f"appending at {entries[0].index} after last index {self.last_index()}",
            )

    def all_entries(self) -> list[Entry]:
        """Every entry after the snapshot (for tests and checkers)."""
        return self._ents[1:]
