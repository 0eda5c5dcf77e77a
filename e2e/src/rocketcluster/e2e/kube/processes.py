"""Child processes that never outlive their parent, and stopping them by PID.

Every process the harness or the realiser starts runs in its own session (so a
signal to its group reaches its children too) and asks the kernel to SIGKILL it
when the thread that started it dies (``prctl(PR_SET_PDEATHSIG)``, set by
``setpriv``), so even a SIGKILLed realiser leaves nothing behind. Each start is
also recorded as a line of JSON (pid, process start time, name) in a ledger file,
which lets the harness double-check by PID — and by start time, so a recycled PID is
never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocketcluster.e2e.kube import procfs

SETPRIV = "setpriv"  # util-linux (Essential in Debian): prctl() and exec, no Python


class SetprivMissingError(RuntimeError):
    pass


def dying_with_parent(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> list[str]:
    """``argv`` run so that the kernel SIGKILLs it when the thread that started it
    exits (``prctl(PR_SET_PDEATHSIG)``, set by ``setpriv`` just before it execs).

    Why not a ``preexec_fn``: the child of a fork runs it with whatever locks other
    threads held at the fork (the dynamic loader's, the official client's gRPC
    threads'), and one such child died with SIGSEGV before its exec (Prometheus,
    spawned beside a running workload). ``setpriv`` is a plain exec.

    A program that cannot be found still fails the start with FileNotFoundError, as
    a direct exec would (``env`` and ``cwd``: where the child looks for it)."""
    _require_executable(argv[0], env, cwd)
    found = shutil.which(SETPRIV)
    if found is None:
        raise SetprivMissingError(
            "setpriv is not on PATH: it comes with util-linux (apt-get install util-linux)"
        )
    return [found, "--pdeathsig", "KILL", "--", *argv]


def _require_executable(
    program: str, env: Mapping[str, str] | None, cwd: str | Path | None
) -> None:
    if os.sep in program:
        path = Path(cwd or ".") / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"no executable {program} (in {cwd or os.getcwd()})")
        return
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        raise FileNotFoundError(f"{program} is not on the PATH {search}")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field
    22), which with the PID identifies one process; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def killpg(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads; a group already gone (or no longer
    ours to signal) is not an error — stopping it is what the caller wanted."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def live_groups() -> set[int]:
    """The process groups that still have a process that is not a zombie. One pass
    over /proc answers for every record at once; asking per record would read all
    of /proc once per record."""
    return {s.pgid for s in procfs.stats() if s.running}


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in procfs.GONE


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    started: int  # start_time() when recorded
    name: str

    def alive(self) -> bool:
        """Still the same process, and not a zombie."""
        return start_time(self.pid) == self.started and not is_zombie(self.pid)

    def group_alive(self, groups: set[int] | None = None) -> bool:
        """Anything left in its process group (it leads one: its own session).
        ``groups`` is :func:`live_groups`, when the caller asks for many records."""
        if self.alive():
            return True
        return self.pid in (live_groups() if groups is None else groups)

    def signal_group(self, sig: int) -> None:
        """Signal its whole group — unless the leader is gone and its PID reused."""
        leader = start_time(self.pid)
        if leader is not None and leader != self.started:
            return  # the PID is someone else's now
        killpg(self.pid, sig)


def record(pid: int, name: str) -> ProcessRecord:
    return ProcessRecord(pid, start_time(pid) or 0, name)


class Ledger:
    """An append-only file of the processes one component started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, rec: ProcessRecord) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"pid": rec.pid, "started": rec.started, "name": rec.name}) + "\n")

    def records(self) -> Iterator[ProcessRecord]:
        if not self.path.exists():
            return
        for line in self.path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                data = json.loads(line)
                yield ProcessRecord(int(data["pid"]), int(data["started"]), str(data["name"]))


def stop_groups(records: list[ProcessRecord], grace: float) -> list[ProcessRecord]:
    """SIGTERM every live group, SIGKILL what is left after ``grace`` seconds; the
    records whose groups still had processes after that (should be none)."""

    def alive(among: list[ProcessRecord]) -> list[ProcessRecord]:
        groups = live_groups() if among else set()
        return [r for r in among if r.group_alive(groups)]

    live = alive(records)
    for rec in live:
        rec.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = alive(live)
    for rec in live:
        rec.signal_group(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = alive(live)
    return live
