"""Front processes started first, before the store process opens anything.

Why. A front is a Python process that imports gRPC and the RocketMQ protocol before it
can serve: about a second and a half on an idle core, eight seconds and more on a
loaded node. Started once the store had opened and the broker had taken its role, that
time was a window in which a new master — named by the controllers, routed to by its
group endpoint — answered no client. The chaos suite found it: after a failover onto a
restarted replica, the official clients' connections were held, then closed, and the
FIFO consumer's backlog stalled past the drain bound (``make chaos``, the pause +
kill-two-replicas episode).

What. ``launch`` starts the fronts first thing (``main`` calls it before importing the
broker). Each imports while the store process imports, recovers its store and
registers, then waits for the configuration frame on its channel; the supervisor
(``supervisor.py``) adopts it and sends that frame when the broker serves clients, and
from there serving is a bind away. A broker that fails before then closes the channels
(``discard``): a front whose channel closes exits by itself.

Only the standard library here: this runs before anything heavy is imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

# The module each front runs. ``rocketctl bench cpu`` replaces it with a feeder that
# speaks the same channel (ctl/bench/cpu/store_feed.py) to measure the store process
# at the rate many fronts would feed it; whoever sets a broker's environment can
# already run anything in it.
FRONT_MODULE_ENV = "ROCKETCLUSTER_FRONT_MODULE"
FRONT_MODULE = "rocketcluster.broker.front"
DISCARD_TIMEOUT_S = 5.0


def front_argv(channel_fd: int, index: int, count: int) -> list[str]:
    """The command line of front ``index`` of ``count``, its channel at ``channel_fd``."""
    module = os.environ.get(FRONT_MODULE_ENV, FRONT_MODULE)
    return [
        sys.executable,
        "-m",
        module,
        "--channel-fd",
        str(channel_fd),
        "--index",
        str(index),
        "--fronts",
        str(count),
    ]


@dataclass
class LaunchedFront:
    """A front started before its supervisor: the process and our end of its channel."""

    index: int
    process: subprocess.Popen[bytes]
    channel: socket.socket


class AdoptedProcess:
    """A started ``Popen`` as the supervisor uses an asyncio subprocess: ``wait()``
    is awaited (in a thread: the process was not started by the event loop)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        return await asyncio.to_thread(self._popen.wait)

    def send_signal(self, sig: int) -> None:
        self._popen.send_signal(sig)

    def kill(self) -> None:
        self._popen.kill()


def launch(count: int) -> list[LaunchedFront]:
    """Start ``count`` fronts; each waits on its channel for its configuration."""
    launched: list[LaunchedFront] = []
    try:
        for index in range(count):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                process = subprocess.Popen(
                    front_argv(theirs.fileno(), index, count), pass_fds=(theirs.fileno(),)
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            launched.append(LaunchedFront(index, process, ours))
    except BaseException:
        discard(launched)
        raise
    return launched


def discard(fronts: list[LaunchedFront]) -> None:
    """End fronts nobody adopted: their channels close (each exits by itself), and
    whichever has not exited after DISCARD_TIMEOUT_S is killed."""
    for front in fronts:
        front.channel.close()
    for front in fronts:
        try:
            front.process.wait(DISCARD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                front.process.send_signal(signal.SIGKILL)
            front.process.wait()
