"""What /proc says of processes, read in one place: one pass over every process's
``stat`` (state, parent, process group) for the questions asked of many processes
at once — which groups are still alive, who is in a group, what runs below a PID —
and per-process details (command line, user, root directory: a chroot-isolated
container's root is its image's file system, not ``/``).

A process whose first thread has ended shows that thread's state — a zombie — while
its other threads may still be ending, and until the last of them has, its files
(listening sockets included) stay open: a port so "closed" still accepts connections.
So a zombie counts as running while any of its threads runs (:func:`running`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GONE = ("Z", "X")  # zombie, dead: nothing runs any more


@dataclass(frozen=True)
class Stat:
    pid: int
    state: str
    ppid: int
    pgid: int

    @property
    def running(self) -> bool:
        return self.state not in GONE or running(self.pid)


def running(pid: int) -> bool:
    """Whether any thread of ``pid`` has not ended yet (the first one is among them:
    a process that is not there, or whose threads are all zombies, does not run)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        with contextlib.suppress(OSError, IndexError):
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in GONE:
                return True
    return False


def stats() -> Iterator[Stat]:
    """Every process's ``/proc/<pid>/stat``; processes that end meanwhile are skipped."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                yield Stat(int(entry.name), fields[0], int(fields[1]), int(fields[2]))


def group_members(pgid: int) -> list[int]:
    """The running processes of the process group ``pgid``."""
    return [s.pid for s in stats() if s.pgid == pgid and s.running]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for s in stats():
        children.setdefault(s.ppid, []).append(s.pid)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    """The command line, space-separated; "" when the process is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def uid(pid: int) -> int:
    """The real user id."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError(f"no Uid in /proc/{pid}/status")


def root(pid: int) -> str:
    """The process's root directory as the host sees it."""
    return os.readlink(f"/proc/{pid}/root")
