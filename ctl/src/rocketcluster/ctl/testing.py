"""Test support: real broker processes on the local runtime, and the official client.

The one way tests start processes (DESIGN §10): through ``LocalRuntime``, so a test
runs exactly what ``rocketctl local up`` runs, and stops exactly what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rocketcluster.api.client.admin import AdminClient
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig
from rocketcluster.broker.store import FlushMode, StoreConfig
from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime

T = TypeVar("T")

# A test's messages are never deleted or refused because the host's disk is fuller
# than production's guards allow (a shared CI disk is often past 75 %).
DISK_GUARDS_OFF: dict[str, Any] = {"disk_max_used_ratio": 1.0, "disk_full_ratio": 1.0}

# Shorter timings than production so tests of checks and persistence run in seconds.
FAST_TUNING: dict[str, Any] = {
    "segment_size": 16 << 20,
    **DISK_GUARDS_OFF,
    "messaging": {
        "transactionCheckDelayMs": 1000,
        "transactionCheckIntervalMs": 1000,
        "transactionCheckMax": 5,
        "consumeStatePersistMs": 100,
        "minInvisibleMs": 100,
        "clientExpiryMs": 5000,
    },
}


def small_store_config(root: Path, **overrides: Any) -> StoreConfig:
    """An in-process store with tiny segments and consume-queue files, so tests cross
    every boundary; sync flush; disk-ratio retention off (the machine's disk is shared:
    its fill level must not drive tests)."""
    settings: dict[str, Any] = {
        "root_dir": root,
        "segment_size": 8192,
        "max_message_bytes": 2048,
        "max_properties_bytes": 512,
        "cq_block_entries": 4,
        "index_entries_per_table": 64,
        "index_map_size": 64 << 20,
        "flush": FlushMode.SYNC,
        "checkpoint_interval_ms": 50,
        "retention_interval_ms": 3_600_000,
        "disk_max_used_ratio": 1.0,
        "disk_full_ratio": 1.0,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def three_controller_members(data_dir: Path) -> ControllerProcessConfig:
    """A three-member controller config in which this process is member 1, for tests
    that build a ``ControllerCore`` in-process. Here, not in ``controller/tests``: every
    workspace member's ``tests`` package is named ``tests``, so a relative import of a
    sibling helper resolves against whichever ``tests`` pytest met first."""
    return ControllerProcessConfig(
        cluster="t",
        node_id=1,
        members=[
            ControllerMember(
                id=i, raft_address=f"10.0.0.{i}:9878", admin_address=f"10.0.0.{i}:8080"
            )
            for i in (1, 2, 3)
        ],
        data_dir=data_dir,
    )


@dataclass
class LocalBroker:
    runtime: LocalRuntime
    state: dict[str, Any]

    @property
    def endpoints(self) -> str:
        return str(self.state["clientEndpoints"])

    @property
    def process(self) -> dict[str, Any]:
        return dict(self.state["processes"][0])

    @property
    def name(self) -> str:
        return str(self.process["name"])

    @property
    def admin_address(self) -> str:
        return str(self.process["addresses"]["admin"])

    def admin(self) -> AdminClient:
        """The broker's admin client: https under TLS, the admin token when auth is on."""
        return AdminClient(
            self.admin_address,
            tls=self.runtime.client_tls(),
            token=local_admin_token(self.runtime.directory),
        )

    def kill(self) -> None:
        self.runtime.kill(self.name)

    def restart(self) -> None:
        self.runtime.restart(self.name)
        self.state = self.runtime.state() or self.state


@contextlib.contextmanager
def local_broker(
    cluster: RocketCluster, directory: Path, overrides: dict[str, Any] | None = None
) -> Iterator[LocalBroker]:
    """A standalone broker for ``cluster``, stopped (by pid) when the block ends."""
    runtime = LocalRuntime(directory)
    settings = {**FAST_TUNING, **(overrides or {})}
    state = runtime.up(cluster, overrides=settings)
    try:
        yield LocalBroker(runtime, state)
    finally:
        runtime.down()


def wait_for(
    probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1, what: str = ""
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after
    ``timeout`` (generous: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or probe}")
        time.sleep(interval)


class _OfficialClientCallbackNoise(logging.Filter):
    """Drops the traceback concurrent.futures logs when a callback of the official
    client raises (5.1.2 re-raises a failed heartbeat inside its done-callback, so a
    broker killed on purpose prints a traceback per heartbeat); anything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        tb = record.exc_info[2] if record.exc_info else None
        while tb is not None:
            if "rocketmq/v5/client" in tb.tb_frame.f_code.co_filename:
                return False
            tb = tb.tb_next
        return True


def main_thread_loop_for_the_official_client() -> None:
    """Give the main thread a current event loop (never run) when it has none.

    The official Python client builds some gRPC calls in the thread that finishes its
    first route query — the caller's, often — and grpc.aio asks asyncio for that
    thread's current loop. A fresh main thread has an implicit one; after any
    ``asyncio.run`` there (the lean client's sends before the official client's, in
    one bench) asyncio refuses, and the client's start fails with "failed to fetch
    topic route". The tests' plugin does this before every test
    (``rocketcluster.e2e.main_thread_loop``); a tool that runs both clients in one
    process calls this before the official one."""
    if threading.current_thread() is not threading.main_thread():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            asyncio.set_event_loop(asyncio.new_event_loop())


def quiet_official_client() -> None:
    """The official client logs every retry at INFO; tests, benchmarks and the demo
    only want warnings, and not its callbacks' tracebacks."""
    # Imported here: client_errors loads the official client (~0.4 s), which a test
    # process that only wants a store (small_store_config) should not pay.
    from rocketcluster.ctl.client_errors import CLIENT_LOGGER

    logging.getLogger(CLIENT_LOGGER).setLevel(logging.WARNING)
    futures = logging.getLogger("concurrent.futures")
    if not any(isinstance(f, _OfficialClientCallbackNoise) for f in futures.filters):
        futures.addFilter(_OfficialClientCallbackNoise())


def stop_child(proc: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """Stop a process this one started, by its PID: SIGTERM, then SIGKILL after
    ``grace_s`` (nothing when it has exited already)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def serving_rocketctl(
    args: list[str],
    port: int,
    log_path: Path,
    *,
    what: str,
    ready_within_s: float = 60,
    append: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """``rocketctl ARGS`` (a server on 127.0.0.1:``port``: the console, the canary) as
    its own process for tests and benchmarks, once its ``/readyz`` answers 200; stopped
    by its PID when the block ends. Its output goes to ``log_path`` (``append``: each
    run's lines are kept); a process that exits before it serves fails with its log."""
    import httpx

    rocketctl = Path(sys.executable).with_name("rocketctl")
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(
                f"rocketctl {args[0]} exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
            )
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    with log_path.open("ab" if append else "wb") as log:
        proc = subprocess.Popen([str(rocketctl), *args], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(ready, ready_within_s, what=f"the {what} to serve")
            yield proc
        finally:
            stop_child(proc)
