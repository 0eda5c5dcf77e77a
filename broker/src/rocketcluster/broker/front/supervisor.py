"""The store process's fronts: started, watched, restarted, stopped.

Each front is a child process with one end of its own socket pair (no path to find,
guard or clean up; the kernel closes it when either side dies). A front that exits
while the broker serves is started again, at once the first time and after a growing
pause if it keeps dying (a port taken, a broken installation), so a crash loop costs
little and the other fronts keep serving meanwhile. The store process never needs a
front's state: a new front begins empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel
from rocketcluster.broker.front.host import FrontConnection
from rocketcluster.broker.front.launch import (
    AdoptedProcess,
    LaunchedFront,
    discard,
    front_argv,
)

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a front imports grpc and the protocol: ~1 s, more when loaded
STOP_TIMEOUT_S = 10.0
LOST_GRACE_S = 1.0  # a front whose channel closed has this long to exit by itself
RESTART_PAUSE_S = (0.0, 0.5, 1.0, 2.0, 5.0)
STEADY_S = 30.0  # a front that served this long starts its pause count again


class FrontProcessHandle(Protocol):
    """What the supervisor uses of a front's process: an asyncio subprocess, or a
    front launched before the event loop ran (``launch.AdoptedProcess``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value


class FrontSlot:
    """One front: its process now, its channel, how often it was started."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: FrontProcessHandle | None = None
        self.connection: FrontConnection | None = None
        self.starts = 0
        self.ready = asyncio.Event()
        self.last_exit: int | None = None
        self.ever_ready = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


class FrontSupervisor:
    def __init__(
        self,
        config: BrokerProcessConfig,
        count: int,
        servicers: dict[str, object],
        observe: Callable[[str, int, float], None] | None = None,
        log_level: str = "INFO",
        launched: list[LaunchedFront] | None = None,
    ) -> None:
        """``launched``: fronts started before the broker opened its store
        (``launch.py``); each slot adopts its own at its first start."""
        self._launched = {front.index: front for front in launched or ()}
        self._config_json = config.model_dump_json(by_alias=True)
        self._count = count
        self._servicers = servicers
        self._observe = observe
        self._log_level = log_level
        self.slots = [FrontSlot(i) for i in range(count)]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._past_refusals: dict[str, int] = {}  # of fronts that exited since
        self._past_relayed_calls = 0
        self._past_batched: dict[str, int] = {}
        self._past_batches: dict[str, int] = {}
        self._down_since: float | None = time.monotonic()  # none serving since

    async def start(self, abort: asyncio.Event | None = None) -> None:
        """Every front started and serving, or RuntimeError naming the one that is not
        (or saying that ``abort`` was set meanwhile)."""
        loop = asyncio.get_running_loop()
        aborted = loop.create_task((abort or asyncio.Event()).wait())
        try:
            await self._start(loop, aborted)
        finally:
            aborted.cancel()

    async def _start(self, loop: asyncio.AbstractEventLoop, aborted: asyncio.Task[Any]) -> None:
        self._tasks = [loop.create_task(self._keep(slot)) for slot in self.slots]
        deadline = time.monotonic() + START_TIMEOUT_S
        for slot in self.slots:
            left = max(0.1, deadline - time.monotonic())
            waiter = loop.create_task(slot.ready.wait())
            done, _ = await asyncio.wait(
                {waiter, self._tasks[slot.index], aborted},
                timeout=left,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if aborted in done:
                waiter.cancel()
                raise RuntimeError("stopped before every front served")
            if waiter not in done:
                waiter.cancel()
                why = (
                    f"exited with {slot.last_exit}"
                    if slot.last_exit is not None
                    else f"not serving after {START_TIMEOUT_S:.0f} s"
                )
                raise RuntimeError(f"front {slot.index} {why} (see its log above)")

    @property
    def serving(self) -> int:
        return sum(1 for slot in self.slots if slot.ready.is_set())

    @property
    def restarts(self) -> int:
        return sum(max(0, slot.starts - 1) for slot in self.slots)

    def problem(self, lasting: float) -> str | None:
        """Why no front serves, once that has lasted ``lasting`` seconds (None while
        one serves, and before the fronts were first started)."""
        if self.serving or self._down_since is None:
            return None
        down = time.monotonic() - self._down_since
        if down < lasting:
            return None
        exits = ", ".join(f"front {s.index}: {s.last_exit}" for s in self.slots)
        return f"no front process serving the client port for {down:.0f} s (exits: {exits})"

    def _serving_changed(self) -> None:
        if self.serving:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = time.monotonic()

    def connections(self) -> int:
        """Client connections with calls in progress, over the serving fronts."""
        return sum(s.connection.stats.connections for s in self.slots if s.connection)

    def relayed(self) -> list[tuple[dict[str, str], int]]:
        """Calls the fronts relayed here, since the start: all of them, and for the
        methods run in batches the calls and the batches (calls / batches: how much one
        append or journal wait carried)."""
        calls = self._past_relayed_calls
        batched, batches = dict(self._past_batched), dict(self._past_batches)
        for slot in self.slots:
            if slot.connection is not None:
                stats = slot.connection.stats
                calls += stats.calls
                _add(batched, stats.batched)
                _add(batches, stats.batches)
        out: list[tuple[dict[str, str], int]] = [({"what": "calls"}, calls)]
        for rpc in sorted(batched):
            out.append(({"what": "batched_calls", "rpc": rpc}, batched[rpc]))
            out.append(({"what": "batches", "rpc": rpc}, batches.get(rpc, 0)))
        return out

    def refusals(self) -> dict[str, int]:
        """Calls refused by each client limit since the broker started."""
        total = dict(self._past_refusals)
        for slot in self.slots:
            if slot.connection is not None:
                for limit, count in slot.connection.stats.refusals.items():
                    total[limit] = total.get(limit, 0) + count
        return total

    def pids(self) -> dict[str, int]:
        return {f"front-{s.index}": s.pid for s in self.slots if s.pid is not None}

    async def _keep(self, slot: FrontSlot) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            try:
                await self._run(slot)
            except Exception:
                log.exception("front %d could not be started", slot.index)
            if self._stopping:
                return
            failures = 0 if time.monotonic() - started > STEADY_S else failures + 1
            if slot.starts == 1 and not slot.ever_ready:
                return  # never came up at the start: start() reports it
            pause = RESTART_PAUSE_S[min(failures, len(RESTART_PAUSE_S) - 1)]
            log.warning(
                "front %d exited (%s); starting it again in %.1f s",
                slot.index,
                slot.last_exit,
                pause,
            )
            await asyncio.sleep(pause)

    async def _run(self, slot: FrontSlot) -> None:
        connection = FrontConnection(
            self._servicers, self._on_hello(slot), self._on_lost(slot), self._observe
        )
        launched = self._launched.pop(slot.index, None)
        process: FrontProcessHandle
        if launched is not None:
            process, ours = AdoptedProcess(launched.process), launched.channel
        else:
            process, ours = await self._spawn(slot.index)
        slot.process = process
        slot.starts += 1
        try:
            channel = await Channel.open(ours, connection.on_frames, connection.lose)
            connection.attach(channel)
            channel.send((f.CONFIG, self._config_json, self._log_level))
            slot.last_exit = await process.wait()
        finally:
            slot.ready.clear()
            self._serving_changed()
            connection.lose("the front exited")
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()

    async def _spawn(self, index: int) -> tuple[FrontProcessHandle, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            argv = front_argv(theirs.fileno(), index, self._count)
            process = await asyncio.create_subprocess_exec(*argv, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return process, ours

    def _on_hello(self, slot: FrontSlot) -> Callable[[FrontConnection], None]:
        def hello(connection: FrontConnection) -> None:
            slot.connection = connection
            slot.ever_ready = True
            slot.ready.set()
            self._serving_changed()

        return hello

    def _on_lost(self, slot: FrontSlot) -> Callable[[FrontConnection, str], None]:
        def lost(connection: FrontConnection, why: str) -> None:
            slot.ready.clear()
            self._serving_changed()
            if slot.connection is connection:
                slot.connection = None
                for limit, count in connection.stats.refusals.items():
                    self._past_refusals[limit] = self._past_refusals.get(limit, 0) + count
                stats = connection.stats
                self._past_relayed_calls += stats.calls
                _add(self._past_batched, stats.batched)
                _add(self._past_batches, stats.batches)
            process = slot.process
            if process is not None and process.returncode is None and not self._stopping:
                # A front whose channel broke serves nothing: end it (unless it is
                # exiting on its own, as a front that cannot bind does, so that its
                # exit status is what the log says), and _keep starts it again.
                asyncio.get_running_loop().call_later(
                    LOST_GRACE_S, self._end, slot.index, process, why
                )

        return lost

    def _end(self, index: int, process: FrontProcessHandle, why: str) -> None:
        if process.returncode is None:
            log.warning("front %d lost its channel (%s); ending it", index, why)
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    async def stop(self) -> None:
        """SIGTERM every front (each answers its calls in progress, relayed here while
        this process still serves), then SIGKILL what is left after STOP_TIMEOUT_S."""
        self._stopping = True
        if self._launched:  # never adopted (the start stopped first)
            await asyncio.to_thread(discard, list(self._launched.values()))
            self._launched.clear()
        processes = [s.process for s in self.slots if s.process and s.process.returncode is None]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        if processes:
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(p.wait()) for p in processes], timeout=STOP_TIMEOUT_S
            )
            for process in processes:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGKILL)
            for waiter in pending:
                with contextlib.suppress(Exception):
                    await waiter
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
