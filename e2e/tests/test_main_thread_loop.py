"""The main-thread loop plugin: after a test that ran ``asyncio.run``, the next one can
still build a grpc.aio call in the main thread, as the official client does when its
first route answer comes back before its callback is attached."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import inner_session

PLUGIN = "rocketcluster.e2e.main_thread_loop"

TESTS = '''
import asyncio
import threading

import grpc


def test_a_finished_asyncio_run_leaves_the_main_thread_without_a_loop():
    asyncio.run(asyncio.sleep(0))


def test_a_grpc_call_is_built_in_the_main_thread():
    """The client's shape: the channel lives on an I/O thread's loop, the call is
    built in the caller's thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def open_channel():
        return grpc.aio.insecure_channel("127.0.0.1:1")

    async def close(channel):
        await channel.close()

    channel = asyncio.run_coroutine_threadsafe(open_channel(), loop).result(30)
    try:
        call = channel.stream_stream("/rocketcluster.Probe/Stream")(timeout=5)
        loop.call_soon_threadsafe(call.cancel)
    finally:
        asyncio.run_coroutine_threadsafe(close(channel), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
'''


def run_session(tmp_path: Path, *plugin_args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_order.py").write_text(TESTS)
    return inner_session(tmp_path, *plugin_args)


def test_without_the_plugin_the_second_test_fails_as_the_client_did(tmp_path: Path) -> None:
    result = run_session(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert "There is no current event loop in thread 'MainThread'" in result.stdout


def test_with_the_plugin_both_pass(tmp_path: Path) -> None:
    result = run_session(tmp_path, "-p", PLUGIN)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
