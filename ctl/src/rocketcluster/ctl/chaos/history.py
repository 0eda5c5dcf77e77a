"""The chaos history: one JSON object per line, in the order things happened.

After Jepsen and OpenChaos: every client operation is an ``invoke`` followed by its
completion — ``ok``, ``fail`` (it definitely did not happen) or ``info`` (nobody
knows: a timeout, a broken connection, a replication timeout whose data may still
surface). Fault windows and notes are ``info`` records of their own. Times are
monotonic seconds since the run started, so a clock step on the machine cannot
reorder the history; the wall-clock start is in the first record.

Record fields (absent when they do not apply):
``type`` invoke|ok|fail|info · ``f`` send|receive|ack|audit|fault|note · ``time`` ·
``process`` (a worker's current id; a new one after every ``info``) · ``id`` (the
message's id, also carried in its body) · ``topic`` · ``mgroup`` (message group) ·
``seq`` (position in its message group) · ``bgroup`` (broker group) · ``queue`` ·
``offset`` (queue offset) · ``error`` · ``session``.

Sessions: a long run may be stopped and resumed by a new process that appends to the
same file. Each process is a *session* with its own monotonic origin, so times of
different sessions are never compared; every record carries its ``session`` and the
checker orders by (session, time). A session's first record is its ``start`` note
(``{"type":"info","f":"note","time":0.0,"session":N,"event":"start","wall":…}``);
the workload namespaces its ids, message groups and process ids by session, so a
resumed run never reuses an id of an earlier one.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

Record = dict[str, Any]

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
COMPLETIONS = (OK, FAIL, INFO)


class History:
    """Appends records to a JSONL file (thread-safe: workers and the fault injector
    share it) and keeps them in memory for the checker and the timeline."""

    def __init__(
        self,
        path: Path | None,
        *,
        clock: Any = time.monotonic,
        session: int = 0,
        resume: bool = False,
        keep: bool = True,
    ) -> None:
        """``session``: written into every record (see the module docstring).
        ``resume``: append to an existing file instead of starting it anew. ``keep``:
        hold the records in memory for :meth:`records`; a long soak passes False and
        reads the file back with :func:`iter_history_file`."""
        self._clock = clock
        self._t0: float = float(clock())
        self.session = session
        self._keep = keep
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._file: IO[str] | None = None
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if resume:
                _drop_torn_tail(path)
            self._file = path.open("a" if resume else "w", buffering=1 << 16)
        self.append(INFO, "note", event="start", wall=time.time())

    def now(self) -> float:
        return round(float(self._clock()) - self._t0, 6)

    def append(self, kind: str, f: str, /, **fields: Any) -> Record:
        with self._lock:
            record: Record = {
                "type": kind,
                "f": f,
                "time": self.now(),
                "session": self.session,
                **fields,
            }
            if self._keep:
                self._records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            return record

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _drop_torn_tail(path: Path) -> None:
    """A process killed while writing leaves a last line without its newline: that
    record was never whole, so it goes before the next session appends."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        size = f.seek(0, 2)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        keep = 0
        step = 1 << 16
        end = size
        while end > 0 and not keep:
            start = max(0, end - step)
            f.seek(start)
            chunk = f.read(end - start)
            at = chunk.rfind(b"\n")
            if at >= 0:
                keep = start + at + 1
            end = start
        f.truncate(keep)


def read_history(path: Path) -> list[Record]:
    return list(iter_history_file(path))


def iter_history_file(path: Path) -> Iterator[Record]:
    """The records of a history file, one line at a time (a soak's history does not
    fit in memory as dicts)."""
    with path.open() as lines:
        yield from iter_history(lines)


def last_session(path: Path) -> int | None:
    """The session of the last record of a history file (None when it has none):
    sessions only grow through a file, so a resumed run starts
    ``last_session(path) + 1``. Reads only the file's tail."""
    if not path.exists():
        return None
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - (1 << 16)))
        tail = f.read().splitlines()
    for raw in reversed(tail):
        with contextlib.suppress(ValueError):
            record = json.loads(raw)
            if isinstance(record, dict):
                return int(record.get("session", 0))
    return None


def iter_history(lines: Iterable[str]) -> Iterator[Record]:
    for raw in lines:
        line = raw.strip()
        if line:
            record: Record = json.loads(line)
            yield record
