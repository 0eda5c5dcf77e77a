"""Children started through ``dying_with_parent`` are SIGKILLed by the kernel when the
thread that started them exits, and a program that cannot be found fails the start
as a direct exec would."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from rocketcluster.ctl.testing import wait_for
from rocketcluster.e2e.kube.processes import dying_with_parent


def test_a_child_dies_with_the_thread_that_started_it() -> None:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        child = subprocess.Popen(dying_with_parent(["sleep", "60"]))
        started.append(child)
        # setpriv sets the signal, then execs sleep: a thread ending before that would
        # end unnoticed (as with any prctl in the child).
        comm = Path(f"/proc/{child.pid}/comm")
        wait_for(lambda: comm.read_text().strip() == "sleep", 10, what="the exec of sleep")

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    child = started[0]
    try:
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_child_outlives_nothing_but_its_thread() -> None:
    child = subprocess.Popen(dying_with_parent(["sleep", "60"]))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)  # this thread still runs: so does the child
    finally:
        child.kill()
        child.wait()


def test_a_missing_program_fails_the_start(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not on the PATH"):
        dying_with_parent(["no-such-program-here"], {"PATH": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="no executable"):
        dying_with_parent(["./missing"], cwd=tmp_path)
    script = tmp_path / "run"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    argv = dying_with_parent(["./run"], cwd=tmp_path)
    assert argv[-1] == "./run" and os.path.basename(argv[0]) == "setpriv"
