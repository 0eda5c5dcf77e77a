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
``offset`` (queue offset) · ``error``.
"""

from __future__ import annotations

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

    def __init__(self, path: Path | None, *, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._t0: float = float(clock())
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", buffering=1 << 16)
        self.append(INFO, "note", event="start", wall=time.time())

    def now(self) -> float:
        return round(float(self._clock()) - self._t0, 6)

    def append(self, kind: str, f: str, /, **fields: Any) -> Record:
        with self._lock:
            record: Record = {"type": kind, "f": f, "time": self.now(), **fields}
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


def read_history(path: Path) -> list[Record]:
    return list(iter_history(path.read_text().splitlines()))


def iter_history(lines: Iterable[str]) -> Iterator[Record]:
    for raw in lines:
        line = raw.strip()
        if line:
            record: Record = json.loads(line)
            yield record
