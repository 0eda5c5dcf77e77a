"""What /proc says of a process whose first thread has ended while another runs on:
it shows as a zombie, yet it still holds its files — a listening socket answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from rocketcluster.e2e.kube import procfs

# The main thread starts a thread that holds a listening socket, says its port, and
# ends by pthread_exit: the process's first thread becomes a zombie, the other runs.
HALF_EXITED = """
import ctypes, socket, sys, threading, time
listener = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=time.sleep, args=(60,)).start()
print(listener.getsockname()[1], flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


@pytest.fixture
def half_exited() -> Iterator[tuple[subprocess.Popen[str], int]]:
    process = subprocess.Popen(
        [sys.executable, "-c", HALF_EXITED], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield process, port
    finally:
        process.kill()
        process.wait()


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_process_whose_first_thread_ended_still_runs(
    half_exited: tuple[subprocess.Popen[str], int],
) -> None:
    process, port = half_exited
    deadline = time.monotonic() + 10
    while _state(process.pid) != "Z":
        assert time.monotonic() < deadline, "the first thread did not end"
        time.sleep(0.01)
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # still serves
    assert procfs.running(process.pid)
    assert [s.running for s in procfs.stats() if s.pid == process.pid] == [True]


def test_a_killed_process_runs_no_more_once_every_thread_ended(
    half_exited: tuple[subprocess.Popen[str], int],
) -> None:
    process, port = half_exited
    process.kill()
    deadline = time.monotonic() + 10
    while procfs.running(process.pid):
        assert time.monotonic() < deadline, "the process did not end"
        time.sleep(0.01)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    assert not procfs.running(process.pid)  # a zombie until reaped: still not running
    process.wait()
    assert not procfs.running(process.pid)
