"""Long polls of the broker groups' views.

The group endpoints (ctl/local/proxy.py) need each group's master the moment it
changes. Asking ten times a second cost the proxy and the controller leader ~15 % of a
core between them while nothing changed; a long poll asks once and is answered when the
views change, when this member stops leading, or when its wait runs out.

A view's version is a digest of its content, so it compares across members: a client
that moves to a new leader keeps its ``known`` version and is answered at once only if
the new leader's views differ."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable
from typing import Any

MAX_WAIT_S = 30.0


def version_of(views: list[dict[str, Any]]) -> str:
    """A digest of the views: equal views, equal versions, on any member."""
    encoded = json.dumps(views, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(encoded, digest_size=8).hexdigest()


class ChangeSignal:
    """Wakes every waiter when what it watches may have changed. Waiters re-check their
    own condition, so a wake for a change that does not concern them costs one check."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait_while(self, unchanged: Callable[[], bool], timeout_s: float) -> None:
        """Return when ``unchanged()`` turns false or after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while unchanged():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            event = self._event
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()
