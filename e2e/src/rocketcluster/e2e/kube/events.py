"""The realiser's event log, ``DIR/events.jsonl``: one JSON object a line with the
wall time and what happened to which pod or claim, so tests can assert the order
of things (SIGTERM before recreation, a pod ready before the next one starts)
without racing the API.

Events: ``pod-created``, ``container-started`` (pid, image, ip), ``ready``,
``not-ready``, ``container-exited`` (exitCode or signal), ``pod-deleting``,
``pod-deleted``, ``pvc-created``, ``pvc-deleted``, ``failed-mount`` (reason
``FailedMount``: the pod's ServiceAccount token could not be had).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", buffering=1)

    def emit(self, event: str, **fields: Any) -> None:
        line = {"time": time.time(), "event": event, **fields}
        self._file.write(json.dumps(line, sort_keys=True) + "\n")

    def close(self) -> None:
        self._file.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an event log (a line being written is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
