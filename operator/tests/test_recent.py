"""``Recent``: callers that come together share one lookup; its answer serves for
``ttl_s``; an error is every waiter's and is not kept; a waiter that leaves does not
take the lookup with it."""

from __future__ import annotations

import asyncio

import pytest

from rocketcluster.operator.recent import Recent


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_callers_together_share_one_lookup_kept_for_the_ttl() -> None:
    clock = Clock()
    recent: Recent[str, int] = Recent(2.0, clock)
    asked = 0
    release = asyncio.Event()

    async def ask() -> int:
        nonlocal asked
        asked += 1
        await release.wait()
        return asked

    callers = [asyncio.create_task(recent.get("a", ask)) for _ in range(50)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*callers) == [1] * 50
    clock.now = 1.9
    assert await recent.get("a", ask) == 1 and asked == 1  # kept
    assert await recent.get("b", ask) == 2  # another key asks on its own
    clock.now = 2.1
    assert await recent.get("a", ask) == 3  # stale: asked again
    recent.forget("a")
    assert await recent.get("a", ask) == 4


async def test_an_error_reaches_every_waiter_and_is_not_kept() -> None:
    recent: Recent[str, int] = Recent(60.0, Clock())
    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        raise ConnectionError("nobody home")

    outcomes = await asyncio.gather(
        *(recent.get("k", failing) for _ in range(5)), return_exceptions=True
    )
    assert calls == 1
    assert all(isinstance(o, ConnectionError) for o in outcomes)

    async def answers() -> int:
        return 7

    assert await recent.get("k", answers) == 7  # the error was not kept


async def test_a_cancelled_waiter_leaves_the_lookup_to_the_others() -> None:
    recent: Recent[str, str] = Recent(60.0, Clock())
    release = asyncio.Event()

    async def ask() -> str:
        await release.wait()
        return "answer"

    first = asyncio.create_task(recent.get("k", ask))
    second = asyncio.create_task(recent.get("k", ask))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    release.set()
    assert await second == "answer"
