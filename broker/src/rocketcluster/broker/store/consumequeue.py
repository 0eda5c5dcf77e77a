"""Consume queues: per topic/queue index of the commit log, in 20-byte entries, every
queue of a store in one SQLite database.

Each entry (``CQ_UNIT``) is the record's commit-log offset (u64), its size (u32) and
its tags code (u64), so a consumer finds message N of a queue with one lookup.

Why one database and not a file per queue (RocketMQ's layout, and ours until now): a
preallocated, memory-mapped file per queue made the cost of a queue 6 MB of disk, two
file descriptors and, after a restart, 6 MB of mapped memory that recovery touched —
whether the queue held one message or none (45 GB of disk and 3.5 GB of RSS for 8,000
queues and 17 MB of messages). Here a queue costs one row until it holds messages, and
then 20 bytes an entry: entries are stored in blocks of ``block_entries`` consecutive
entries, one row each (keyed by queue and block number), so a busy queue writes a row
per block, not per message, and a consumer's read is one range query. RocketMQ came to
the same answer (RIP-66: consume queues in RocksDB).

Writes are cheap and in memory: ``put`` appends to the queue's unflushed tail, which
readers see at once. ``ConsumeQueueTable.flush`` (the store's checkpoint, every second,
on a thread) writes every tail in one transaction, so the database always holds a
prefix of each queue's entries and never a torn one; recovery re-dispatches what came
after from the commit log (``logics_flushed`` in the store's checkpoint), which is the
truth: consume queues are derived data.

Threads: the event loop puts and reads; the checkpoint thread flushes; the tier's
uploader and the stats collector read. The database is in WAL mode with a connection
for writing and one for reading, so a read never waits for a flush to commit; the
unflushed tails are guarded by one short lock.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from rocketcluster.api.names import path_component_problem
from rocketcluster.broker.store.errors import DiskFullError, InvalidNameError, StoreError

CQ_UNIT: Final = struct.Struct(">QIQ")
CQ_UNIT_SIZE: Final = CQ_UNIT.size  # 20
DATABASE_NAME: Final = "consumequeue.db"
DEFAULT_BLOCK_ENTRIES: Final = 64

_SCHEMA: Final = (
    # empty_at: where a queue whose blocks were all cut stands (its next index).
    "CREATE TABLE IF NOT EXISTS queues ("
    " qid INTEGER PRIMARY KEY, topic TEXT NOT NULL, queue_id INTEGER NOT NULL,"
    " empty_at INTEGER NOT NULL DEFAULT 0, UNIQUE (topic, queue_id))",
    # first: the queue index of the block's first entry (a queue may start mid-block);
    # units: its entries, consecutive, CQ_UNIT each.
    "CREATE TABLE IF NOT EXISTS blocks ("
    " qid INTEGER NOT NULL, block INTEGER NOT NULL, first INTEGER NOT NULL,"
    " units BLOB NOT NULL, PRIMARY KEY (qid, block)) WITHOUT ROWID",
)
# Per queue: its lowest and highest block's first index and entry count, and the first
# and last entry (their commit-log offsets tell recovery whether the queue needs work).
_BOUNDS: Final = """
SELECT q.qid, q.topic, q.queue_id, q.empty_at,
       lo.first, lo.units_first, hi.first + length(hi.units) / 20, hi.units_last
FROM queues q
LEFT JOIN (SELECT qid, min(block) AS mn, max(block) AS mx FROM blocks GROUP BY qid) m
  ON m.qid = q.qid
LEFT JOIN (SELECT qid, block, first, substr(units, 1, 20) AS units_first FROM blocks) lo
  ON lo.qid = q.qid AND lo.block = m.mn
LEFT JOIN (SELECT qid, block, first, units, substr(units, -20, 20) AS units_last FROM blocks) hi
  ON hi.qid = q.qid AND hi.block = m.mx
"""


class _Bounds(NamedTuple):
    qid: int
    topic: str
    queue_id: int
    empty_at: int
    min_index: int | None
    first_unit: bytes | None
    max_index: int | None
    last_unit: bytes | None


# (topic, queue id) -> commit-log offsets of the first and last flushed entry.
Edges = dict[tuple[str, int], tuple[int, int]]


def _edges(rows: list[_Bounds]) -> Edges:
    return {
        (b.topic, b.queue_id): (CQ_UNIT.unpack(b.first_unit)[0], CQ_UNIT.unpack(b.last_unit)[0])
        for b in rows
        if b.first_unit and b.last_unit
    }


class CqEntry(NamedTuple):
    physical_offset: int
    size: int
    tags_code: int


def _full(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc).lower()


@dataclass(frozen=True, slots=True)
class _Tail:
    """A queue's unflushed entries as a flush took them."""

    cq: ConsumeQueue
    first: int
    units: bytes


class QueueDatabase:
    """The SQLite file that holds every queue's flushed entries."""

    def __init__(self, path: Path, block_entries: int = DEFAULT_BLOCK_ENTRIES) -> None:
        if block_entries < 1:
            raise ValueError(f"block_entries must be at least 1, not {block_entries}")
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        with self._writer:
            for statement in _SCHEMA:
                self._writer.execute(statement)
        # Block numbers are index // block_entries: a database keeps the size it was
        # made with (in user_version), whatever a later configuration says.
        stored = int(self._writer.execute("PRAGMA user_version").fetchone()[0])
        if stored == 0:
            self._writer.execute(f"PRAGMA user_version = {int(block_entries)}")
            stored = block_entries
        self.block_entries = stored
        self._reader = self._connect()
        self.write_lock = threading.Lock()
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=60.0
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # Each flush is one transaction, every second at most: FULL costs one fsync of
        # the log there, and the database is then as durable as the checkpoint says.
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    # -- reading ---------------------------------------------------------------------

    def bounds(self, *, own_connection: bool = False) -> list[_Bounds]:
        """Every queue's row; the four last are None for a queue without flushed
        entries. ``own_connection``: on a connection of its own (WAL lets it read
        beside the others), for a caller on a worker thread — the query takes a second
        at 100,000 queues, and holding the shared reader that long would stall every
        read on the event loop."""
        if not own_connection:
            with self._read_lock:
                return [_Bounds._make(row) for row in self._reader.execute(_BOUNDS)]
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=60.0)
        try:
            return [_Bounds._make(row) for row in conn.execute(_BOUNDS)]
        finally:
            conn.close()

    def read(self, qid: int, start: int, end: int) -> bytes:
        """The flushed entries [start, end) of queue ``qid`` (fewer where it has none)."""
        k = self.block_entries
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT first, units FROM blocks WHERE qid = ? AND block BETWEEN ? AND ?"
                " ORDER BY block",
                (qid, start // k, (end - 1) // k),
            ).fetchall()
        out = bytearray()
        at = start
        for first, units in rows:
            if first > at or at >= end:
                break
            lo = (at - first) * CQ_UNIT_SIZE
            hi = min(len(units), (end - first) * CQ_UNIT_SIZE)
            if lo >= hi:
                continue
            out += units[lo:hi]
            at += (hi - lo) // CQ_UNIT_SIZE
        return bytes(out)

    # -- writing (callers hold write_lock) -------------------------------------------

    def append(
        self, new_queues: list[tuple[int, str, int]], tails: list[tuple[int, int, bytes]]
    ) -> None:
        """In one transaction: the queues created since the last flush (qid, topic,
        queue id), then each tail (qid, first index, units): entries that follow what
        the queue holds, or start it. A partly filled block grows in place."""
        k = self.block_entries
        rows: list[tuple[int, int, int, bytes]] = []
        grows: list[tuple[bytes, int, int, int]] = []
        for qid, first, units in tails:
            at, pos = first, 0
            while pos < len(units):
                block = at // k
                take = min((block + 1) * k - at, (len(units) - pos) // CQ_UNIT_SIZE)
                chunk = units[pos : pos + take * CQ_UNIT_SIZE]
                if at % k:
                    grows.append((chunk, qid, block, at))  # the block may exist
                else:
                    rows.append((qid, block, at, chunk))
                at += take
                pos += take * CQ_UNIT_SIZE
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO queues (qid, topic, queue_id) VALUES (?, ?, ?)", new_queues
            )
            for chunk, qid, block, at in grows:
                # Read and written back whole (<= block_entries entries): SQL's || would
                # make text of the bytes.
                found = conn.execute(
                    "SELECT first, units FROM blocks WHERE qid = ? AND block = ?", (qid, block)
                ).fetchone()
                if found is None:  # the queue starts here, in mid-block
                    rows.append((qid, block, at, chunk))
                else:
                    rows.append((qid, block, found[0], found[1] + chunk))
            conn.executemany(
                "INSERT OR REPLACE INTO blocks (qid, block, first, units) VALUES (?, ?, ?, ?)",
                rows,
            )

    def truncate(self, qid: int, index: int) -> None:
        """Drop queue ``qid``'s entries at and after ``index``."""
        k = self.block_entries
        with self._transaction() as conn:
            conn.execute("DELETE FROM blocks WHERE qid = ? AND first >= ?", (qid, index))
            conn.execute(
                "UPDATE blocks SET units = substr(units, 1, (? - first) * 20)"
                " WHERE qid = ? AND block = ? AND first < ?",
                (index, qid, index // k, index),
            )
            # A queue cut to nothing still stands at ``index``: its next message
            # takes that queue offset, not 0, after a restart.
            conn.execute("UPDATE queues SET empty_at = ? WHERE qid = ?", (index, qid))

    def drop_before(self, cuts: Sequence[tuple[int, int]]) -> int:
        """For each (qid, index) of ``cuts``, delete the blocks of queue ``qid`` that
        hold only entries below ``index``, but never its last one (it says where the
        queue stands); how many. One transaction (one fsync) for them all: retention
        past a segment touches every queue with an entry in it, 100,000 of them."""
        if not cuts:
            return 0
        deleted = 0
        with self._transaction() as conn:
            for qid, index in cuts:
                cursor = conn.execute(
                    "DELETE FROM blocks WHERE qid = ? AND first + length(units) / 20 <= ?"
                    " AND block < (SELECT max(block) FROM blocks WHERE qid = ?)",
                    (qid, index, qid),
                )
                deleted += int(cursor.rowcount)
        return deleted

    def remove_all(self) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM blocks")
            conn.execute("DELETE FROM queues")

    def remove_queue(self, qid: int) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM blocks WHERE qid = ?", (qid,))
            conn.execute("DELETE FROM queues WHERE qid = ?", (qid,))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if _full(exc):
                raise DiskFullError(str(self.path), 0, ": consume queues") from exc
            raise StoreError(f"consume-queue database {self.path}: {exc}") from exc

    def close(self) -> None:
        for conn in (self._reader, self._writer):
            with contextlib.suppress(sqlite3.Error):
                conn.close()


class ConsumeQueue:
    """Entries [min_index, max_index) of one topic/queue: the flushed ones in the
    database, the rest (from ``_tail_first``) in memory until the next flush."""

    def __init__(
        self,
        table: ConsumeQueueTable,
        qid: int,
        topic: str,
        queue_id: int,
        min_index: int = 0,
        max_index: int = 0,
        *,
        started: bool = False,
    ) -> None:
        self._table = table
        self.qid = qid
        self.topic = topic
        self.queue_id = queue_id
        self.min_index = min_index
        self.max_index = max_index
        self._tail = bytearray()
        self._tail_first = max_index
        # A queue that never held an entry may start anywhere (a slave that starts
        # copying its master mid-stream).
        self._started = started or max_index > min_index
        # The first and the last entry, as (index, unit), once read: the stats read
        # them for every queue every snapshot, and each would be a query.
        self._head: tuple[int, bytes] | None = None
        self._last: tuple[int, bytes] | None = None

    # -- writing ---------------------------------------------------------------------

    def put(self, index: int, physical_offset: int, size: int, tags_code: int) -> None:
        self.put_units(index, [CQ_UNIT.pack(physical_offset, size, tags_code)])

    def put_units(self, index: int, units: list[bytes]) -> None:
        """Put consecutive entries from ``index``, each already packed (``CQ_UNIT``).
        Entries already held are checked, not written again (a replayed dispatch after
        recovery); a gap after the last entry is refused."""
        if index < self.max_index:
            skip = min(len(units), self.max_index - index)
            for k in range(skip):
                existing = self.get(index + k)
                offset = CQ_UNIT.unpack(units[k])[0]
                if existing is None or existing.physical_offset != offset:
                    raise StoreError(
                        f"{self.topic}/{self.queue_id}: entry {index + k} already holds "
                        f"{existing}, refusing to overwrite with offset {offset}"
                    )
            units, index = units[skip:], index + skip
            if not units:
                return
        if index > self.max_index:
            if self._started:
                raise StoreError(
                    f"{self.topic}/{self.queue_id}: entry {index} leaves a gap after "
                    f"{self.max_index}"
                )
            with self._table.tail_lock:
                self.min_index = self.max_index = self._tail_first = index
        table = self._table
        with table.tail_lock:
            self._tail += units[0] if len(units) == 1 else b"".join(units)
            self._last = (index + len(units) - 1, units[-1])
            self.max_index = index + len(units)
            self._started = True
            table.dirty[self.qid] = self

    # -- reading ---------------------------------------------------------------------

    def get(self, index: int) -> CqEntry | None:
        for known in (self._last, self._head):
            if known is not None and known[0] == index and self.min_index <= index < self.max_index:
                return CqEntry._make(CQ_UNIT.unpack(known[1]))
        raw = self.raw_entries(index, 1)
        if not raw:
            return None
        if index == self.max_index - 1:
            self._last = (index, raw)
        elif index == self.min_index:
            self._head = (index, raw)
        return CqEntry._make(CQ_UNIT.unpack(raw))

    def entries(self, index: int, count: int) -> list[CqEntry]:
        """Up to ``count`` entries from ``index``."""
        return [CqEntry._make(t) for t in CQ_UNIT.iter_unpack(self.raw_entries(index, count))]

    def raw_entries(self, index: int, count: int) -> bytes:
        """Up to ``count`` entries from ``index`` as their ``CQ_UNIT`` bytes: for scans
        that decode many entries at once."""
        with self._table.tail_lock:
            end = min(index + count, self.max_index)
            if index < self.min_index or index >= end:
                return b""
            tail_first = self._tail_first
            lo = max(index, tail_first)
            from_tail = (
                bytes(self._tail[(lo - tail_first) * CQ_UNIT_SIZE : (end - tail_first) * 20])
                if end > tail_first
                else b""
            )
        if index >= tail_first:
            return from_tail
        # Entries below the tail were flushed before the tail was cut: the database
        # holds them, whatever a flush does meanwhile.
        return self._table.database.read(self.qid, index, min(end, tail_first)) + from_tail

    def last_entry(self) -> CqEntry | None:
        return self.get(self.max_index - 1)

    def first_index_at_or_after(self, physical_offset: int) -> int:
        """The first index whose entry lies at or after ``physical_offset`` (retention
        counts what it removes unread by it)."""
        return self._first_index_at_or_after(physical_offset)

    def _first_index_at_or_after(self, physical_offset: int) -> int:
        """Entries are ordered by commit-log offset: binary search over the indexes."""
        lo, hi = self.min_index, self.max_index
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.get(mid)
            if entry is not None and entry.physical_offset < physical_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- truncation and retention ----------------------------------------------------

    def truncate_from_physical(self, physical_offset: int) -> None:
        """Drop entries that point at or after ``physical_offset`` (recovery, HA)."""
        new_max = self._first_index_at_or_after(physical_offset)
        if new_max >= self.max_index:
            return
        table = self._table
        with table.database.write_lock:  # no flush runs meanwhile
            with table.tail_lock:
                if new_max >= self._tail_first:
                    del self._tail[(new_max - self._tail_first) * CQ_UNIT_SIZE :]
                else:
                    self._tail.clear()
                    self._tail_first = new_max
                self._head = self._last = None
                self.max_index = new_max
                self.min_index = min(self.min_index, new_max)
            table.database.truncate(self.qid, new_max)

    def forget_before_physical(self, min_physical: int) -> int | None:
        """Retention: forget entries pointing below ``min_physical``; the index below
        which the database may drop this queue's blocks (None: nothing to drop). The
        table drops every queue's blocks in one transaction."""
        new_min = self._first_index_at_or_after(min_physical)
        if new_min <= self.min_index:
            return None
        with self._table.tail_lock:
            self.min_index = new_min
            self._head = None
        return min(new_min, self._tail_first)  # the database holds what is flushed

    # -- flushing (ConsumeQueueTable) ------------------------------------------------

    def take_tail(self) -> _Tail | None:
        with self._table.tail_lock:
            if not self._tail:
                return None
            return _Tail(self, self._tail_first, bytes(self._tail))

    def flushed(self, tail: _Tail) -> None:
        """``tail`` is in the database: drop it from memory. Entries are dropped only
        under the write lock the flush holds, so the tail still starts there."""
        with self._table.tail_lock:
            count = len(tail.units) // CQ_UNIT_SIZE
            del self._tail[: len(tail.units)]
            self._tail_first += count

    def first_unflushed_offset(self) -> int | None:
        """The commit-log offset of the first entry not flushed yet, if any."""
        with self._table.tail_lock:
            if not self._tail:
                return None
            offset: int = CQ_UNIT.unpack_from(self._tail, 0)[0]
            return offset

    def last_unflushed_offset(self) -> int | None:
        """The commit-log offset of the last entry not flushed yet, if any."""
        with self._table.tail_lock:
            if not self._tail:
                return None
            offset: int = CQ_UNIT.unpack_from(self._tail, len(self._tail) - CQ_UNIT_SIZE)[0]
            return offset

    @property
    def unflushed(self) -> int:
        return len(self._tail) // CQ_UNIT_SIZE

    def destroy(self) -> None:
        self._table.forget(self)


class ConsumeQueueTable:
    """Every consume queue of a store, in ``<root>/consumequeue.db``."""

    def __init__(self, root: Path, block_entries: int = DEFAULT_BLOCK_ENTRIES) -> None:
        self.root = root
        self.block_entries = block_entries
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        # Queues with unflushed entries, and queues made since the last flush (their
        # rows go into the database with the flush: making a queue never waits on it).
        self.dirty: dict[int, ConsumeQueue] = {}
        self._new: dict[int, ConsumeQueue] = {}
        self._next_qid = 1
        self.tail_lock = threading.Lock()
        self._database: QueueDatabase | None = None

    @property
    def database(self) -> QueueDatabase:
        if self._database is None:
            self._database = QueueDatabase(self.root / DATABASE_NAME, self.block_entries)
        return self._database

    def legacy_directories(self) -> list[Path]:
        """Directories of the layout before the database (a directory per topic, a
        file per queue): recovery removes them and rebuilds from the commit log."""
        if not self.root.exists():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir())

    def load(self) -> Edges:
        """Open every queue: one query, nothing read or mapped per queue. Returns
        their edges (see ``edges``), read by the same query, for the recovery."""
        rows = self.database.bounds()
        for b in rows:
            low = b.empty_at if b.min_index is None else b.min_index
            high = b.empty_at if b.max_index is None else b.max_index
            self._queues[(b.topic, b.queue_id)] = ConsumeQueue(
                self, b.qid, b.topic, b.queue_id, low, high, started=b.empty_at > 0
            )
        self._next_qid = max((b.qid for b in rows), default=0) + 1
        return _edges(rows)

    def edges(self, *, own_connection: bool = False) -> Edges:
        """Commit-log offsets of the first and last flushed entry of each queue that
        has any: recovery and retention touch only the queues whose edges cross their
        offsets (``own_connection``: see QueueDatabase.bounds)."""
        return _edges(self.database.bounds(own_connection=own_connection))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            # The last line of defence: every entry validates names, so this never
            # triggers unless one of them was bypassed (topics name tier objects and
            # metrics; a NUL or a path in one is a bug upstream).
            problem = path_component_problem(topic)
            if problem:
                raise InvalidNameError("topic", topic, f"not a safe name: {problem}")
            with self.tail_lock:
                qid, self._next_qid = self._next_qid, self._next_qid + 1
                cq = ConsumeQueue(self, qid, topic, queue_id)
                self._new[qid] = cq
            self._queues[(topic, queue_id)] = cq
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def ids(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue, without touching the queues."""
        return list(self._queues)

    def queues_of(self, topic: str) -> list[ConsumeQueue]:
        return [cq for (t, _), cq in self._queues.items() if t == topic]

    def flush(self) -> int:
        """Write every queue's unflushed entries in one transaction; how many. On a
        failure (a full disk) everything stays in memory for the next flush."""
        database = self.database
        with database.write_lock:
            with self.tail_lock:
                dirty, self.dirty = self.dirty, {}
                new, self._new = self._new, {}
            tails = [t for t in (cq.take_tail() for cq in dirty.values()) if t is not None]
            if not tails and not new:
                return 0
            try:
                database.append(
                    [(q.qid, q.topic, q.queue_id) for q in new.values()],
                    [(t.cq.qid, t.first, t.units) for t in tails],
                )
            except BaseException:
                with self.tail_lock:
                    self._new = {**new, **self._new}
                    self.dirty = {**dirty, **self.dirty}
                raise
            for t in tails:
                t.cq.flushed(t)
        return sum(len(t.units) for t in tails) // CQ_UNIT_SIZE

    def truncate_from_physical(self, physical_offset: int, edges: Edges | None = None) -> None:
        """Every queue: drop the entries at or after ``physical_offset``. Only queues
        whose last entry is there are touched (``edges``, or one query, finds them)."""
        edges = self.edges() if edges is None else edges
        for cq in self:
            last = cq.last_unflushed_offset()
            if last is None:
                last = edges.get((cq.topic, cq.queue_id), (0, -1))[1]
            if last >= physical_offset:
                cq.truncate_from_physical(physical_offset)

    def delete_before_physical(self, min_physical: int, edges: Edges | None = None) -> int:
        """Every queue: forget the entries below ``min_physical`` (retention). Only
        queues whose first entry is below it are touched. Blocks deleted. (All at once:
        recovery and the admin API's retention run; the store's housekeeping takes the
        same steps a page at a time, off the event loop where it can.)"""
        edges = self.edges() if edges is None else edges
        return self.drop_before(self.retention_cuts(min_physical, edges, list(self)))

    def retention_cuts(
        self, min_physical: int, edges: Edges, queues: Iterable[ConsumeQueue]
    ) -> list[tuple[int, int]]:
        """Forget, in memory, the entries of ``queues`` below ``min_physical``: for
        each queue that had any, (qid, the index below which its blocks may go)."""
        cuts = []
        for cq in queues:
            if cq.min_index >= cq.max_index:
                continue  # holds nothing (any more)
            edge = edges.get((cq.topic, cq.queue_id))
            first = edge[0] if edge is not None else cq.first_unflushed_offset()
            if first is not None and first < min_physical:
                cut = cq.forget_before_physical(min_physical)
                if cut is not None:
                    cuts.append((cq.qid, cut))
        return cuts

    def drop_before(self, cuts: Sequence[tuple[int, int]]) -> int:
        """Delete the blocks below each cut, in one transaction: blocks deleted."""
        database = self.database
        with database.write_lock:
            return database.drop_before(cuts)

    def reset(self) -> None:
        """Forget every queue (a slave that starts over from its master)."""
        database = self.database
        with database.write_lock:
            database.remove_all()
            self.clear()

    def forget(self, cq: ConsumeQueue) -> None:
        self._queues.pop((cq.topic, cq.queue_id), None)
        with self.database.write_lock:
            with self.tail_lock:
                self.dirty.pop(cq.qid, None)
                unwritten = self._new.pop(cq.qid, None) is not None
            if not unwritten:
                self.database.remove_queue(cq.qid)

    def clear(self) -> None:
        with self.tail_lock:
            self._queues.clear()
            self.dirty.clear()
            self._new.clear()

    def remove_topic(self, topic: str) -> None:
        for cq in self.queues_of(topic):
            cq.destroy()

    def close(self) -> None:
        if self._database is not None:
            self._database.close()
            self._database = None

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
