"""A tool that runs the lean client (``asyncio.run``) and then the official one in the
main thread gives the main thread a loop again first: the official client's start
asks asyncio for the thread's current loop, which ``asyncio.run`` took away."""

from __future__ import annotations

import asyncio
import threading

from rocketcluster.ctl.testing import main_thread_loop_for_the_official_client
from rocketcluster.e2e.main_thread_loop import current_loop


async def _nothing() -> None:
    return None


def test_after_asyncio_run_the_main_thread_has_a_loop_again() -> None:
    before = current_loop()
    asyncio.run(_nothing())
    assert current_loop() is None  # what the official client met
    main_thread_loop_for_the_official_client()
    loop = current_loop()
    assert loop is not None and not loop.is_running()
    main_thread_loop_for_the_official_client()
    assert current_loop() is loop  # one is enough
    asyncio.set_event_loop(before)
    loop.close()


def test_other_threads_are_left_alone() -> None:
    seen: list[asyncio.AbstractEventLoop | None] = []

    def run() -> None:
        main_thread_loop_for_the_official_client()
        seen.append(current_loop())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [None]
