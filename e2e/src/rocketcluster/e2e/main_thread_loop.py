"""A pytest plugin: every test starts with the main thread holding a current event loop,
as it does in a fresh process (``addopts = -p rocketcluster.e2e.main_thread_loop``).

Why: the official RocketMQ 5 Python client runs gRPC on an I/O thread of its own, but
builds some calls (the telemetry stream that brings a consumer its settings) in
whichever thread finishes its first route query — the caller's main thread when the
answer comes back before the callback is attached. grpc.aio then asks asyncio for
that thread's current loop. In a fresh process there is an implicit one; once any
``asyncio.run`` has finished in the thread (many tests use it) asyncio refuses with
"There is no current event loop in thread 'MainThread'", and the consumer's start-up
fails after 10 s waiting for settings — a race that failed a CI run. Applications hit
the same thing in the official client; our tests should not depend on it.

The plugin gives the main thread one loop for the whole session whenever it has none
at a test's start; that loop is never run (as the implicit one is not) and is closed
when the session ends. Tests that set their own loop, or run in an ``asyncio.run``,
are not touched: the check happens before each test, not during it.
"""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest

LOOP_KEY = pytest.StashKey[asyncio.AbstractEventLoop]()


def current_loop() -> asyncio.AbstractEventLoop | None:
    """The loop asyncio hands this thread — the one set, or the implicit one of a
    fresh main thread — or None where it refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: a module fixture may start official clients too."""
    if threading.current_thread() is not threading.main_thread() or current_loop():
        return
    stash = item.session.stash
    if LOOP_KEY not in stash:
        stash[LOOP_KEY] = asyncio.new_event_loop()
    asyncio.set_event_loop(stash[LOOP_KEY])


def pytest_sessionfinish(session: pytest.Session) -> None:
    loop = session.stash.get(LOOP_KEY, None)
    if loop is None:
        return
    if current_loop() is loop:
        asyncio.set_event_loop(None)
    loop.close()
