"""The event loop a broker process (store or front) runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

EVENT_LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The broker's event loop. grpc.aio runs on any asyncio loop (on one that is not
    asyncio's own it polls its completion queue from a thread of its own), and uvloop
    takes the per-callback cost of the loop itself down: every RPC, HA frame and
    timer goes through it several times."""
    if name == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop
