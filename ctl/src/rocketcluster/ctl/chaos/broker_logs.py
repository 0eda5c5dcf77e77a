"""What the brokers' own logs say about a run, beside what the clients saw.

- Event-loop blocks (broker/loop_watchdog.py): a broker whose loop ran on CPU for
  :data:`LOOP_BLOCK_LIMIT_CPU_S` without yielding sent no heartbeat and served no
  replication meanwhile; its group counted it out while nothing was wrong with the
  network. The seed-3 soak found one (a replica rebuilding its POP state from the whole
  retained journal, up to 33 s); a run with such a block fails. Time the loop was late
  without using CPU (the process paused by a fault, or starved by the busy host) does
  not count.
- POP state rebuilds (broker/messaging/pop_replay.py): how many, and from where. An old
  master whose cut tail held POP journal records rebuilds from the latest checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rocketcluster.broker.loop_watchdog import BLOCK_MESSAGE
from rocketcluster.broker.messaging.pop_replay import (
    FROM_CHECKPOINT,
    REBUILD_MESSAGE,
    REBUILT_MESSAGE,
)

# The brokers' heartbeat timeout at the controllers (3 s): a loop held longer on CPU
# drops its broker from the SyncStateSet with nothing wrong around it.
LOOP_BLOCK_LIMIT_CPU_S = 3.0
# The local soak's brokers log to `chaos-broker-<group>-<n>.log`; the operated soak's
# pods, through the emulator's kubelet, to `<namespace>/<pod>_broker.log` (the
# container is named `broker`), which its runner copies beside them.
BROKER_LOGS = ("chaos-broker-*.log", "*/*_broker.log")
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \w+ \S+ "


def _pattern(message: str) -> re.Pattern[str]:
    """A log format string as a regex: each placeholder a capture group."""
    text = re.escape(message)
    for placeholder, group in ((r"%\.2f", r"([\d.]+)"), ("%d", r"(\d+)"), ("%s", "(.+?)")):
        text = text.replace(placeholder, group)
    return re.compile(_STAMP + text)


_BLOCK = _pattern(BLOCK_MESSAGE)
_REBUILD = _pattern(REBUILD_MESSAGE)
_REBUILT = _pattern(REBUILT_MESSAGE)


def scan(logs: Iterable[tuple[str, Iterable[str]]]) -> dict[str, Any]:
    """``logs``: (process, lines) for each broker; the summary's two sections."""
    blocks: list[dict[str, Any]] = []
    rebuilds: list[dict[str, Any]] = []
    for process, lines in logs:
        for line in lines:
            if "event loop blocked" in line and (m := _BLOCK.match(line)):
                at, seconds, cpu = m.groups()
                blocks.append(
                    {"process": process, "at": at, "seconds": float(seconds), "cpu_s": float(cpu)}
                )
            elif "POP consumption state" in line:
                if m := _REBUILD.match(line):
                    at, origin, _, records = m.groups()
                    rebuilds.append(
                        {
                            "process": process,
                            "at": at,
                            "from_checkpoint": origin == FROM_CHECKPOINT,
                            "records": int(records),
                        }
                    )
                elif (m := _REBUILT.match(line)) and rebuilds:
                    rebuilds[-1]["seconds"] = float(m.group(2))
    over = [b for b in blocks if b["cpu_s"] >= LOOP_BLOCK_LIMIT_CPU_S]
    longest = max(blocks, key=lambda b: b["seconds"], default=None)
    return {
        "loop_blocks": {
            "count": len(blocks),
            "limit_cpu_s": LOOP_BLOCK_LIMIT_CPU_S,
            "longest": longest,
            "over_limit": over,
        },
        "pop_rebuilds": {
            "count": len(rebuilds),
            "from_checkpoint": sum(r["from_checkpoint"] for r in rebuilds),
            "most_records": max((r["records"] for r in rebuilds), default=0),
            "longest_s": max((r.get("seconds", 0.0) for r in rebuilds), default=0.0),
            "each": rebuilds,
        },
    }


def read(logs_dir: Path) -> dict[str, Any]:
    """:func:`scan` over the brokers' logs a run kept (``DIR/logs``)."""

    def lines(path: Path) -> Iterable[str]:
        with path.open(encoding="utf-8", errors="replace") as f:
            yield from f

    paths = sorted(p for pattern in BROKER_LOGS for p in logs_dir.glob(pattern))
    return scan((p.stem, lines(p)) for p in paths)


def summary_lines(found: dict[str, Any]) -> list[str]:
    """A few lines for the report."""
    blocks, rebuilds = found["loop_blocks"], found["pop_rebuilds"]
    longest = blocks["longest"]
    text = [
        f"  broker event loops: {blocks['count']} held ≥ 1 s"
        + (
            f", longest {longest['seconds']:.1f} s ({longest['cpu_s']:.1f} s on CPU, "
            f"{longest['process']} at {longest['at']})"
            if longest
            else ""
        )
        + f"; limit {blocks['limit_cpu_s']:g} s on CPU: "
        + (f"{len(blocks['over_limit'])} OVER" if blocks["over_limit"] else "none over")
    ]
    for b in blocks["over_limit"]:
        text.append(
            f"    OVER: {b['process']} at {b['at']}: {b['seconds']:.1f} s, "
            f"{b['cpu_s']:.1f} s on CPU"
        )
    text.append(
        f"  POP state rebuilds: {rebuilds['count']} ({rebuilds['from_checkpoint']} from a "
        f"checkpoint), at most {rebuilds['most_records']} records, "
        f"longest {rebuilds['longest_s']:.2f} s"
    )
    return text
