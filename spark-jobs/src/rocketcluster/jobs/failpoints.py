"""A pause a test can hold a run at: the data source, about to read a partition of a
table, announces it in ``$ROCKETCLUSTER_JOBS_FAILPOINT_DIR`` (``reading-<what>``) and
waits while ``hold-<table>`` exists there — so a test can kill a broker or a controller
mid-run, deterministically. Inert unless the variable is set: a production run never
waits."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

FAILPOINT_ENV = "ROCKETCLUSTER_JOBS_FAILPOINT_DIR"
WAIT_S = 120.0


def reading(table: str, what: str) -> None:
    """Announce ``what`` (of ``table``) is about to be read, then wait while the test
    holds ``table`` (at most WAIT_S)."""
    where = os.environ.get(FAILPOINT_ENV)
    if not where:
        return
    directory = Path(where)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{table} {what}")
    (directory / f"reading-{name}").write_text(what)
    deadline = time.monotonic() + WAIT_S
    while (directory / f"hold-{table}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
