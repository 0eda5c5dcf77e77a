"""A run that outlives its process: what a soak keeps on disk between sessions.

``state.json`` is written after every episode, so a run stopped (the stop file, a
signal) or killed (the machine went away) goes on from its last finished episode:
the schedule is the seed's, skipped to that episode (schedule.py), the history is
appended (history.py marks every record with its session), and the cluster's data
and disks are the ones the last session left (run.py). What the final audit must
find is what every session acknowledged, read back from the history — less what
retention deleted after every consumer group had it (a disk-full fault makes a broker
free space by deleting its oldest consumed segments, as it should).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.ctl.chaos.history import OK, Record


@dataclass
class RunState:
    scenarios: str
    seed: int
    groups: int
    target_faults: int = 0  # 0: the soak runs for duration_s of faults instead
    duration_s: float = 0.0
    episodes: int = 0  # finished episodes, over every session
    faults: int = 0  # faults injected in them (skipped ones not counted)
    fault_seconds: float = 0.0  # time spent injecting and recovering, every session
    sessions: int = 0  # sessions ended
    finished: bool = False
    reported: int = 0  # faults at the last progress line
    notes: list[str] = field(default_factory=list)
    # Seconds of fault phase of the sessions that ended; the running one is added at
    # each save and folded in when it ends.
    closed_fault_seconds: float = 0.0
    # Each audit: {"session": the one it covered (None: every session), "complete": it
    # found every acknowledged id in time, "retired": ids retention had deleted}.
    audits: list[dict[str, Any]] = field(default_factory=list)

    def save(self, path: Path, session_fault_seconds: float) -> None:
        """Atomically: a kill mid-write leaves the previous state."""
        self.fault_seconds = self.closed_fault_seconds + session_fault_seconds
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    def resume_conflict(self, seed: int | None, faults: int | None) -> str | None:
        """Why a resume asked with ``seed`` and ``faults`` (None: not given) cannot go
        on with this run: a resumed run keeps its own, and a different one asked for
        would silently be ignored (``make chaos-soak RESUME=1`` passed seed 1 to seed
        2's run, and only its schedule said which seed ran)."""
        for flag, given, kept in (
            ("--seed", seed, self.seed),
            ("--faults", faults, self.target_faults),
        ):
            if given is not None and given != kept:
                return f"{flag} {given} asked, but it has {flag} {kept}; leave {flag} out to go on"
        return None

    def end_session(self, session_fault_seconds: float) -> None:
        self.closed_fault_seconds += session_fault_seconds
        self.fault_seconds = self.closed_fault_seconds
        self.sessions += 1

    @classmethod
    def load(cls, path: Path) -> RunState:
        data: dict[str, Any] = json.loads(path.read_text())
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown fields {sorted(unknown)}")
        return cls(**data)


# Where a message is stored: (topic, broker group, queue id) and its queue offset.
QueueKey = tuple[str, str, int]


@dataclass
class Acknowledged:
    """What every session acknowledged, per topic, and where a consumer group first
    received each id (the queue and offset it is stored at)."""

    ids: dict[str, set[str]] = field(default_factory=dict)
    stored_at: dict[str, tuple[QueueKey, int]] = field(default_factory=dict)


def acknowledged(records: Iterable[Record], session: int | None = None) -> Acknowledged:
    """One pass over a history: every session's, or only ``session``'s."""
    found = Acknowledged()
    for r in records:
        if r.get("type") != OK or (session is not None and r.get("session", 0) != session):
            continue
        if r.get("f") == "send":
            found.ids.setdefault(str(r.get("topic")), set()).add(str(r["id"]))
        elif r.get("f") == "receive" and "id" in r and "queue" in r and "offset" in r:
            key = (str(r.get("topic")), str(r.get("bgroup")), int(r["queue"]))
            found.stored_at.setdefault(str(r["id"]), (key, int(r["offset"])))
    return found


def retired_by_retention(
    acked: Acknowledged, floors: dict[QueueKey, int]
) -> tuple[dict[str, set[str]], dict[str, int]]:
    """What the audit can still read, and per topic how many acknowledged ids it
    cannot: those a consumer group received from a queue offset below the first one
    the queue still holds (``floors``, from the masters). An id no consumer group
    received stays wanted, whatever the floors: only the audit can vouch for it."""
    want: dict[str, set[str]] = {}
    retired: dict[str, int] = {}
    for topic, ids in acked.ids.items():
        keep = want.setdefault(topic, set())
        for message_id in ids:
            where = acked.stored_at.get(message_id)
            if where is not None and where[1] < floors.get(where[0], 0):
                retired[topic] = retired.get(topic, 0) + 1
            else:
                keep.add(message_id)
    return want, retired


def crashes(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Processes that exited without a fault killing them (episodes.py notes them)."""
    return [
        {"session": r.get("session", 0), "time": r["time"], "process": r.get("process")}
        for r in records
        if r.get("f") == "note" and r.get("event") == "crashed"
    ]
