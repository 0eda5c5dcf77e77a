"""IndexService: find messages by message id or by key, in an LMDB environment.

Entries are split into tables (LMDB named databases) that each cover a range of the
commit log, so retention drops a whole table instead of deleting keys one by one. A
key is ``kind | name | 0x00 | commit-log offset (u64)``: re-adding the same record
after recovery is idempotent, and lookups verify the record they find, so entries
left behind by a truncated tail are harmless. The index is derived data: it is
flushed with the consume queues and rebuilt from the commit log when it is lost.

Writes run on a thread of their own (``submit``): LMDB releases the GIL while it
inserts and commits, so indexing uses the second core instead of the event loop's.
The thread gathers work for up to ``COALESCE_S`` (or ``COALESCE_REQUESTS`` records)
and writes it in one transaction: waking it and committing once per append cost a
broker taking one message per request (the official client) a tenth of its CPU.
A lookup that needs the newest entries (``wait_indexed``) cuts the wait short.
``indexed_offset`` says how far the index has caught up.
"""

from __future__ import annotations

import collections
import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import lmdb

if TYPE_CHECKING:
    from lmdb import _Database

from rocketcluster.broker.store.dispatch_batch import IndexColumns
from rocketcluster.broker.store.errors import DiskFullError, StoreError

log = logging.getLogger(__name__)

KIND_ID: Final = b"i"
KIND_KEY: Final = b"k"
_OFFSET: Final = struct.Struct(">Q")
_KEY: Final = struct.Struct(">QQ")
_SIZE: Final = struct.Struct(">I")
MAX_TABLES: Final = 4096
COALESCE_S: Final = 0.05
COALESCE_REQUESTS: Final = 4096


class IndexEntry(NamedTuple):
    physical_offset: int
    size: int


class IndexRequest(NamedTuple):
    topic: str
    physical_offset: int
    size: int
    msg_id: str
    keys: tuple[str, ...]


def name_hash(name: bytes) -> int:
    """A stable 64-bit hash (two independent C checksums; collisions are verified)."""
    return (zlib.crc32(name) << 32) | zlib.adler32(name)


def _count(columns: list[IndexColumns]) -> int:
    return sum(len(c.phys) for c in columns)


def _table_name(base: int) -> bytes:
    return b"t%020d" % base


class IndexService:
    def __init__(self, directory: Path, map_size: int, entries_per_table: int) -> None:
        self.directory = directory
        self.entries_per_table = entries_per_table
        directory.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(
            str(directory),
            map_size=map_size,
            max_dbs=MAX_TABLES + 1,
            sync=False,
            metasync=False,
            readahead=False,
        )
        self._tables_db = self._env.open_db(b"tables")
        self._tables: list[tuple[int, _Database]] = []
        with self._env.begin(db=self._tables_db) as txn:
            bases = [_OFFSET.unpack(k)[0] for k, _ in txn.cursor()]
        for base in sorted(bases):
            self._tables.append((base, self._env.open_db(_table_name(base))))
        self._current_count = 0
        if self._tables:
            with self._env.begin() as txn:
                self._current_count = txn.stat(self._tables[-1][1])["entries"]
        self._queue: collections.deque[tuple[list[IndexColumns], int]] = collections.deque()
        self._queued = 0  # requests in _queue
        self._urgent = False  # somebody waits for the newest entries
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.indexed_offset = 0
        self.failure: BaseException | None = None

    # -- the writer thread -------------------------------------------------------

    def start(self, indexed_offset: int) -> None:
        """Start the writer thread; everything below ``indexed_offset`` is indexed."""
        self.indexed_offset = indexed_offset
        self._thread = threading.Thread(target=self._run, name="index-writer", daemon=True)
        self._thread.start()

    def submit(self, columns: list[IndexColumns], end_offset: int) -> None:
        """Queue dispatched records for the writer thread (the caller's thread never
        blocks); everything below ``end_offset`` is then indexed."""
        with self._cond:
            self._queue.append((columns, end_offset))
            self._queued += _count(columns)
            # Wake the thread to start gathering, or when enough is gathered; not for
            # every batch in between (see COALESCE_S).
            if len(self._queue) == 1 or self._queued >= COALESCE_REQUESTS:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                deadline = time.monotonic() + COALESCE_S
                while not (self._stopping or self._urgent or self._queued >= COALESCE_REQUESTS):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                self._urgent = False
                work = list(self._queue)
                if not work:  # stop(drain=False) emptied the queue meanwhile
                    continue
            try:
                self.add_columns([c for batch, _ in work for c in batch])
            except Exception as exc:  # a full disk: keep the work, retry in a second
                if self.failure is None:
                    log.error("index writes failing, retrying: %s", exc, exc_info=True)
                self.failure = exc
                if self._stopping:
                    return
                time.sleep(1.0)
                continue
            self.failure = None
            with self._cond:
                # stop(drain=False) may have emptied the queue meanwhile.
                for _ in range(min(len(work), len(self._queue))):
                    self._queued -= _count(self._queue.popleft()[0])
                self.indexed_offset = max(self.indexed_offset, work[-1][1])
                self._cond.notify_all()

    def wait_indexed(self, offset: int, timeout: float) -> bool:
        """Block until everything below ``offset`` is indexed (or the timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self.indexed_offset < offset:
                self._urgent = True
                self._cond.notify_all()
            while self.indexed_offset < offset and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0 or self.failure is not None:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, *, drain: bool = True) -> None:
        """Stop the thread, after finishing queued work unless ``drain`` is false (or
        the work keeps failing)."""
        with self._cond:
            if not drain:
                self._queue.clear()
                self._queued = 0
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def add(self, requests: Iterable[IndexRequest]) -> None:
        """Index a batch of records (recovery) in one write transaction."""
        self._write(lambda txn: self._add(txn, requests))

    def _write(self, fill: Callable[[lmdb.Transaction], None]) -> None:
        try:
            txn = self._env.begin(write=True)
            try:
                fill(txn)
            except BaseException:
                txn.abort()
                raise
            txn.commit()
        except lmdb.MapFullError as exc:
            raise DiskFullError(str(self.directory), 0, ": the index map is full") from exc
        except lmdb.Error as exc:
            if "No space left" in str(exc):
                raise DiskFullError(str(self.directory), 0) from exc
            raise StoreError(f"index write failed: {exc}") from exc

    def add_columns(self, columns: list[IndexColumns]) -> None:
        """Index dispatched records, given as columns, in one write transaction."""
        self._write(lambda txn: self._add_columns(txn, columns))

    def _add_columns(self, txn: lmdb.Transaction, columns: list[IndexColumns]) -> None:
        """Message ids first, column by column (a new table starts at the record that
        overflows the current one); the few keyed records go to the newest table after
        them: an entry may sit in a newer table than its offset says (dropped later,
        harmless), never in an older one (dropped too early)."""
        db = self._tables[-1][1] if self._tables else None
        count = self._current_count
        per_table = self.entries_per_table
        pack = _KEY.pack
        size_pack = _SIZE.pack
        items: list[tuple[bytes, bytes]] = []
        append = items.append
        for col in columns:
            for phys, size, msg_id in zip(col.phys, col.sizes, col.ids, strict=True):
                if not msg_id:
                    continue
                if db is None or count >= per_table:
                    self._put_sorted(txn, db, items)
                    items = []
                    append = items.append
                    db = self._new_table(txn, phys)
                    count = 0
                name = KIND_ID + msg_id.encode()
                append((pack((zlib.crc32(name) << 32) | zlib.adler32(name), phys), size_pack(size)))
                count += 1
        for col in columns:
            for topic, phys, size, keys in col.keyed:
                if db is None:
                    db = self._new_table(txn, phys)
                    count = 0
                prefix = KIND_KEY + topic.encode() + b"\x00"
                for key in keys:
                    items.append((pack(name_hash(prefix + key.encode()), phys), size_pack(size)))
                count += len(keys)
        self._put_sorted(txn, db, items)
        self._current_count = count

    def _add(self, txn: lmdb.Transaction, requests: Iterable[IndexRequest]) -> None:
        db = self._tables[-1][1] if self._tables else None
        count = self._current_count
        pack = _KEY.pack
        items: list[tuple[bytes, bytes]] = []
        for req in requests:
            if not req.msg_id and not req.keys:
                continue
            if db is None or count >= self.entries_per_table:
                self._put_sorted(txn, db, items)
                items = []
                db = self._new_table(txn, req.physical_offset)
                count = 0
            phys = req.physical_offset
            size = _SIZE.pack(req.size)
            if req.msg_id:
                items.append((pack(name_hash(KIND_ID + req.msg_id.encode()), phys), size))
            if req.keys:
                prefix = KIND_KEY + req.topic.encode() + b"\x00"
                for key in req.keys:
                    items.append((pack(name_hash(prefix + key.encode()), phys), size))
            count += 1 + len(req.keys)
        self._put_sorted(txn, db, items)
        self._current_count = count

    @staticmethod
    def _put_sorted(
        txn: lmdb.Transaction, db: _Database | None, items: list[tuple[bytes, bytes]]
    ) -> None:
        if items and db is not None:
            items.sort()  # neighbouring keys share pages: fewer pages dirtied per batch
            txn.cursor(db=db).putmulti(items)

    def _new_table(self, txn: lmdb.Transaction, base: int) -> _Database:
        if len(self._tables) >= MAX_TABLES:
            raise StoreError(f"the index has {MAX_TABLES} tables; raise index_entries_per_table")
        db = self._env.open_db(_table_name(base), txn=txn)
        txn.put(_OFFSET.pack(base), b"", db=self._tables_db)
        self._tables.append((base, db))
        return db

    def _scan(self, name: bytes, limit: int) -> list[IndexEntry]:
        h = name_hash(name)
        start = _KEY.pack(h, 0)
        found: dict[int, IndexEntry] = {}
        with self._env.begin() as txn:
            for _base, db in reversed(self._tables):
                cursor = txn.cursor(db=db)
                if not cursor.set_range(start):
                    continue
                for key, value in cursor:
                    key_hash, offset = _KEY.unpack(key)
                    if key_hash != h:
                        break
                    # Re-dispatch after recovery may index a record in two tables.
                    found[offset] = IndexEntry(offset, _SIZE.unpack(value)[0])
                if len(found) >= limit:
                    break
        return sorted(found.values(), reverse=True)[:limit]

    def lookup_id(self, msg_id: str, limit: int = 32) -> list[IndexEntry]:
        return self._scan(KIND_ID + msg_id.encode(), limit)

    def lookup_key(self, topic: str, key: str, limit: int = 64) -> list[IndexEntry]:
        return self._scan(KIND_KEY + topic.encode() + b"\x00" + key.encode(), limit)

    def drop_tables_below(self, min_offset: int) -> int:
        """Drop tables whose every entry points below ``min_offset``: a table covers
        [its base, the next table's base)."""
        dropped = 0
        while len(self._tables) > 1 and self._tables[1][0] <= min_offset:
            base, db = self._tables.pop(0)
            with self._env.begin(write=True) as txn:
                txn.drop(db, delete=True)
                txn.delete(_OFFSET.pack(base), db=self._tables_db)
            dropped += 1
        return dropped

    def sync(self) -> None:
        self._env.sync(True)

    def close(self) -> None:
        self.stop()
        self._env.close()
