"""DiskStorage: the Raft log, hard state and snapshot of one member, on disk.

A write-ahead log of CRC-checked records (entries and hard states, appended in the
order the driver persists them), fsynced before anything that depends on it is sent;
replaying it in order (an entry at index i replaces everything from i on) rebuilds the
log, and a torn tail is cut at the last valid record. Snapshots are written atomically
beside it; after a snapshot the log is rewritten without the compacted prefix, so it
stays bounded however long the cluster runs.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from rocketcluster.controller.raft.storage import MemoryStorage
from rocketcluster.controller.raft.types import (
    Entry,
    HardState,
    Snapshot,
    SnapshotMetadata,
)

_RECORD: Final = struct.Struct(">II")  # payload length, crc32(payload)
_ENTRY: Final = struct.Struct(">cQQ")  # b"E", term, index (data follows)
_HARD: Final = struct.Struct(">cQQQ")  # b"H", term, vote, commit
_COMPACTED: Final = struct.Struct(">cQQ")  # b"C", index, term of the log's first slot
_SNAP: Final = struct.Struct(">QQ")  # index, term (data follows)
WAL = "wal.log"
SNAPSHOT = "snapshot.bin"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _record(payload: bytes) -> bytes:
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


class DiskStorage(MemoryStorage):
    """MemoryStorage (what the core reads) kept in step with files (what survives)."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.torn_bytes = 0
        self._load()
        self._wal = (directory / WAL).open("ab")

    # -- loading -------------------------------------------------------------

    def _load(self) -> None:
        snap_path = self.directory / SNAPSHOT
        if snap_path.exists():
            raw = snap_path.read_bytes()
            index, term = _SNAP.unpack_from(raw)
            super().apply_snapshot(Snapshot(SnapshotMetadata(index, term), raw[_SNAP.size :]))
        wal_path = self.directory / WAL
        if not wal_path.exists():
            return
        data = wal_path.read_bytes()
        pos = 0
        while pos + _RECORD.size <= len(data):
            length, crc = _RECORD.unpack_from(data, pos)
            payload = data[pos + _RECORD.size : pos + _RECORD.size + length]
            if len(payload) != length or zlib.crc32(payload) != crc:
                break
            self._replay(payload)
            pos += _RECORD.size + length
        if pos < len(data):  # a torn tail: the write that never finished
            self.torn_bytes = len(data) - pos
            with wal_path.open("r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())

    def _replay(self, payload: bytes) -> None:
        kind = payload[:1]
        if kind == b"E":
            _, term, index = _ENTRY.unpack_from(payload)
            if index > self.first_index() - 1:
                super().append([Entry(term, index, payload[_ENTRY.size :])])
        elif kind == b"H":
            _, term, vote, commit = _HARD.unpack_from(payload)
            super().set_hard_state(HardState(term, vote, commit))
        elif kind == b"C":
            # Compaction kept entries the snapshot also covers (for slow followers):
            # the log starts before the snapshot index.
            _, index, term = _COMPACTED.unpack_from(payload)
            if index <= self.snapshot().metadata.index:
                self._ents = [Entry(term, index)]

    # -- writing (the driver calls these, then sync) ----------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        super().append(entries)
        for e in entries:
            self._wal.write(_record(_ENTRY.pack(b"E", e.term, e.index) + e.data))

    def set_hard_state(self, hard_state: HardState) -> None:
        super().set_hard_state(hard_state)
        self._wal.write(
            _record(_HARD.pack(b"H", hard_state.term, hard_state.vote, hard_state.commit))
        )

    def sync(self) -> None:
        self._wal.flush()
        os.fsync(self._wal.fileno())

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """A follower installs the leader's snapshot: it replaces the whole log."""
        super().apply_snapshot(snapshot)
        self._save_snapshot(snapshot)
        self._rewrite_wal()

    def create_snapshot(self, index: int, data: bytes) -> Snapshot:
        snapshot = super().create_snapshot(index, data)
        self._save_snapshot(snapshot)
        return snapshot

    def compact(self, compact_index: int) -> None:
        super().compact(compact_index)
        self._rewrite_wal()

    def _save_snapshot(self, snapshot: Snapshot) -> None:
        meta = snapshot.metadata
        _write_atomically(
            self.directory / SNAPSHOT, _SNAP.pack(meta.index, meta.term) + snapshot.data
        )

    def _rewrite_wal(self) -> None:
        """The log without what the snapshot covers, replacing the old one atomically."""
        head = self._ents[0]
        parts = [
            _record(_COMPACTED.pack(b"C", head.index, head.term)),
            _record(_HARD.pack(b"H", *self._hs())),
        ]
        parts += [_record(_ENTRY.pack(b"E", e.term, e.index) + e.data) for e in self.all_entries()]
        self._wal.close()
        _write_atomically(self.directory / WAL, b"".join(parts))
        self._wal = (self.directory / WAL).open("ab")

    def _hs(self) -> tuple[int, int, int]:
        hs = self.hard_state
        return hs.term, hs.vote, hs.commit

    def wal_bytes(self) -> int:
        self._wal.flush()
        return (self.directory / WAL).stat().st_size

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.sync()
        self._wal.close()
