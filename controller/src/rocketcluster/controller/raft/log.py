"""The Raft log as the core sees it: stable entries in `Storage`, plus an unstable tail.

The unstable part holds what this node has accepted but the driver has not yet made
durable (entries and possibly an incoming snapshot). It is handed out in `Ready`, and
trimmed by `stable_to` / `stable_snap_to` once the driver reports it durable. A crash
loses it, which is safe because nothing that depends on it has been sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from rocketcluster.controller.raft.errors import (
    CompactedError,
    RaftInvariantError,
    UnavailableError,
)
from rocketcluster.controller.raft.storage import Storage, limit_size
from rocketcluster.controller.raft.types import Entry, Snapshot


class Unstable:
    """Entries (and maybe a snapshot) not yet durable.

    Invariant: `entries[i]` has index `offset + i`; when `snapshot` is set, `offset` is
    `snapshot.metadata.index + 1` or less (entries may follow the snapshot).
    """

    __slots__ = ("entries", "offset", "snapshot")

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset

    def maybe_first_index(self) -> int | None:
        if self.snapshot is not None:
            return self.snapshot.metadata.index + 1
        return None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.metadata.index
        return None

    def maybe_term(self, index: int) -> int | None:
        if index < self.offset:
            snap = self.snapshot
            if snap is not None and snap.metadata.index == index:
                return snap.metadata.term
            return None
        last = self.maybe_last_index()
        if last is None or index > last:
            return None
        return self.entries[index - self.offset].term

    def stable_to(self, index: int, term: int) -> None:
        """Drop entries up to `index` now durable, unless they were replaced meanwhile."""
        found = self.maybe_term(index)
        if found is None:
            return
        if found == term and index >= self.offset:
            del self.entries[: index + 1 - self.offset]
            self.offset = index + 1

    def stable_snap_to(self, index: int) -> None:
        if self.snapshot is not None and self.snapshot.metadata.index == index:
            self.snapshot = None

    def restore(self, snapshot: Snapshot) -> None:
        self.offset = snapshot.metadata.index + 1
        self.entries = []
        self.snapshot = snapshot

    def truncate_and_append(self, entries: Sequence[Entry]) -> None:
        after = entries[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(entries)
        elif after <= self.offset:
            # Replaces everything unstable, and (once persisted) the stable suffix too.
            self.offset = after
            self.entries = list(entries)
        else:
            self.entries = [*self.entries[: after - self.offset], *entries]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        upper = self.offset + len(self.entries)
        if lo > hi or lo < self.offset or hi > upper:
            raise RaftInvariantError(
                "unstable slice in bounds",
                f"[{lo},{hi}) outside unstable [{self.offset},{upper})",
            )
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    """Stable storage plus the unstable tail, with the commit and apply cursors.

    Invariants: `applied <= committed <= last_index()`; `committed` never decreases;
    entries at or below `committed` are never truncated.
    """

    __slots__ = ("applied", "committed", "max_apply_size", "storage", "unstable")

    def __init__(self, storage: Storage, max_apply_size: int | None = None) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(offset=last + 1)
        # A fresh log starts "committed and applied" up to its snapshot.
        self.committed = first - 1
        self.applied = first - 1
        self.max_apply_size = max_apply_size

    def __repr__(self) -> str:
        return (
            f"RaftLog(committed={self.committed}, applied={self.applied}, "
            f"unstable.offset={self.unstable.offset}, unstable.len={len(self.unstable.entries)})"
        )

    # --- positions --------------------------------------------------------------------

    # first_index, last_index and term run several times per message: they read the
    # unstable part inline (as `Unstable.maybe_first_index` / `maybe_last_index` /
    # `maybe_term` would) instead of through those calls.

    def first_index(self) -> int:
        snap = self.unstable.snapshot
        if snap is not None:
            return snap.metadata.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        unstable = self.unstable
        if unstable.entries:
            return unstable.offset + len(unstable.entries) - 1
        if unstable.snapshot is not None:
            return unstable.snapshot.metadata.index
        return self.storage.last_index()

    def term(self, index: int) -> int:
        """Term at `index`; raises `CompactedError` / `UnavailableError` out of range."""
        unstable = self.unstable
        snap = unstable.snapshot
        dummy = snap.metadata.index if snap is not None else self.storage.first_index() - 1
        if index < dummy:
            raise CompactedError(index, dummy + 1)
        ents = unstable.entries
        if ents:
            offset = unstable.offset
            if offset <= index < offset + len(ents):
                return ents[index - offset].term  # (then index <= last_index() too)
            last = offset + len(ents) - 1
        elif snap is None:
            # Nothing unstable (the usual case on a settled node): storage alone answers.
            last = self.storage.last_index()
            if index > last:
                raise UnavailableError(index, last)
            return self.storage.term(index)
        else:
            last = snap.metadata.index
        if index > last:
            raise UnavailableError(index, last)
        found = unstable.maybe_term(index)
        if found is not None:
            return found
        return self.storage.term(index)

    def term_or_zero(self, index: int) -> int:
        """Term at `index`, 0 when unknown (compacted or past the end)."""
        if index > self.last_index():
            return 0  # (what `term` would say by raising; an exception costs more)
        try:
            return self.term(index)
        except (CompactedError, UnavailableError):
            return 0

    def last_term(self) -> int:
        return self.term(self.last_index())

    def match_term(self, index: int, term: int) -> bool:
        if index > self.last_index():
            return False  # the usual miss (a follower's new entries): no exception
        try:
            return self.term(index) == term
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, last_index: int, term: int) -> bool:
        """Raft §5.4.1: is a candidate's log at least as up to date as ours?"""
        our_term = self.last_term()
        return term > our_term or (term == our_term and last_index >= self.last_index())

    # --- reading entries --------------------------------------------------------------

    def slice(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        """Entries in [lo, hi), from storage then the unstable tail."""
        if lo > hi:
            raise RaftInvariantError("slice bounds ordered", f"lo {lo} > hi {hi}")
        first = self.first_index()
        if lo < first:
            raise CompactedError(lo, first)
        last = self.last_index()
        if hi > last + 1:
            raise UnavailableError(hi - 1, last)
        if lo == hi:
            return []
        ents: list[Entry] = []
        offset = self.unstable.offset
        if lo < offset:
            stored = self.storage.entries(lo, min(hi, offset), max_size)
            if len(stored) < min(hi, offset) - lo:
                return stored  # size-limited
            ents = stored
        if hi > offset:
            tail = self.unstable.slice(max(lo, offset), hi)
            ents = [*ents, *tail] if ents else tail
        return limit_size(ents, max_size)

    def entries(self, lo: int, max_size: int | None = None) -> list[Entry]:
        last = self.last_index()
        if lo > last:
            return []
        return self.slice(lo, last + 1, max_size)

    def all_entries(self) -> list[Entry]:
        """Every entry in the log after the snapshot (tests and checkers)."""
        return self.slice(self.first_index(), self.last_index() + 1)

    def unstable_entries(self) -> list[Entry]:
        return list(self.unstable.entries)

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    def has_next_committed_entries(self) -> bool:
        # committed <= applied answers it without reading the first index (the usual case).
        return self.committed > self.applied and (
            self.committed > max(self.applied + 1, self.first_index()) - 1
        )

    def next_committed_entries(self) -> list[Entry]:
        """Committed entries not yet applied. They may still be in the unstable tail: the
        driver persists the same `Ready` before applying it, so that is safe."""
        if self.committed <= self.applied:
            return []  # (lo below is > applied, so the range would be empty)
        lo = max(self.applied + 1, self.first_index())
        if self.committed + 1 <= lo:
            return []
        return self.slice(lo, self.committed + 1, self.max_apply_size)

    # --- changing the log -------------------------------------------------------------

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """Index of the first entry whose term differs from ours, or 0 if none does."""
        for ent in entries:
            if not self.match_term(ent.index, ent.term):
                return ent.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest index <= `index` whose term is <= `term`, and that term.

        Used for fast backtracking: every entry above the result has a term larger than
        `term`, so none can match the other side's log. (0 term: unknown, compacted.)
        """
        while index > 0:
            try:
                our = self.term(index)
            except (CompactedError, UnavailableError):
                return index, 0
            if our <= term:
                return index, our
            index -= 1
        return 0, 0

    def maybe_append(
        self, index: int, log_term: int, committed: int, entries: Sequence[Entry]
    ) -> int | None:
        """AppendEntries on a follower: append if our entry at `index` has `log_term`.

        Returns the last index now known to match the leader, or None on mismatch.
        """
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict:
            if conflict <= self.committed:
                raise RaftInvariantError(
                    "committed entries are never overwritten",
                    f"conflict at {conflict} <= committed {self.committed}",
                )
            self.append(entries[conflict - (index + 1) :])
        self.commit_to(min(committed, last_new))
        return last_new

    def append(self, entries: Sequence[Entry]) -> int:
        if not entries:
            return self.last_index()
        after = entries[0].index - 1
        if after < self.committed:
            raise RaftInvariantError(
                "committed entries are never overwritten",
                f"append after {after} < committed {self.committed}",
            )
        self.unstable.truncate_and_append(entries)
        return self.last_index()

    def commit_to(self, to_commit: int) -> None:
        if to_commit <= self.committed:
            return  # commit never goes backwards; stale commit indexes are ignored
        if to_commit > self.last_index():
            raise RaftInvariantError(
                "commit index within the log",
                f"commit to {to_commit} beyond last index {self.last_index()}",
            )
        self.committed = to_commit

    def maybe_commit(self, max_index: int, term: int) -> bool:
        """Commit up to `max_index` only if that entry is from `term` (Raft §5.4.2)."""
        if max_index > self.committed and self.term_or_zero(max_index) == term:
            self.commit_to(max_index)
            return True
        return False

    def applied_to(self, index: int) -> None:
        if index == 0:
            return
        if index > self.committed or index < self.applied:
            raise RaftInvariantError(
                "applied within (previous applied, committed]",
                f"applied to {index}, applied {self.applied}, committed {self.committed}",
            )
        self.applied = index

    def stable_to(self, index: int, term: int) -> None:
        self.unstable.stable_to(index, term)

    def stable_snap_to(self, index: int) -> None:
        self.unstable.stable_snap_to(index)

    def restore(self, snapshot: Snapshot) -> None:
        """Adopt a snapshot from the leader: everything up to it is committed."""
        self.committed = snapshot.metadata.index
        self.unstable.restore(snapshot)
