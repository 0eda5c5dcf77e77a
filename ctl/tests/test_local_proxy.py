"""The local group endpoint across a master's death, over real sockets: a client's
connection is held — never refused or closed — until the next master takes it, so a
gRPC client never enters its reconnect backoff because of a failover."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from rocketcluster.ctl.local.proxy import GroupProxy


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A master that answers: every byte back."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _dies_before_answering(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A master killed while the connection was accepted: it reads, never answers, and
    the connection resets."""
    await reader.read(1 << 16)
    writer.transport.abort()


async def _listen(handler: object) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"{host}:{port}"


@pytest.fixture
async def proxy() -> AsyncIterator[GroupProxy]:
    group_proxy = GroupProxy("g", _free_address())
    server = await group_proxy.serve()
    try:
        yield group_proxy
    finally:
        server.close()


async def _client(proxy: GroupProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = proxy.listen.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def _still_open(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Nothing arrived and the connection was not closed within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await reader.read(1)
    except TimeoutError:
        return True
    return False


async def test_a_dead_master_holds_the_connection_until_the_next_one(proxy: GroupProxy) -> None:
    proxy.set_master(_free_address())  # nothing listens there: refused, as after SIGKILL
    reader, writer = await _client(proxy)
    writer.write(b"PRI * HTTP/2.0")
    await writer.drain()
    assert await _still_open(reader, 0.5), "the proxy closed or answered for a dead master"
    server, address = await _listen(_echo)
    try:
        proxy.set_master(address)
        async with asyncio.timeout(10):
            assert await reader.readexactly(14) == b"PRI * HTTP/2.0"
    finally:
        writer.close()
        server.close()


async def test_a_master_dying_before_it_answered_is_replaced_and_the_bytes_replayed(
    proxy: GroupProxy,
) -> None:
    dying, dying_address = await _listen(_dies_before_answering)
    proxy.set_master(dying_address)
    reader, writer = await _client(proxy)
    writer.write(b"preface")
    await writer.drain()
    assert await _still_open(reader, 0.5)
    writer.write(b" and a request")  # sent while the proxy waits for a master
    await writer.drain()
    server, address = await _listen(_echo)
    try:
        proxy.set_master(address)
        async with asyncio.timeout(10):
            assert await reader.readexactly(21) == b"preface and a request"
        writer.write(b"!")  # and from here on a plain pipe to the new master
        async with asyncio.timeout(10):
            assert await reader.readexactly(1) == b"!"
    finally:
        writer.close()
        server.close()
        dying.close()


async def test_a_master_dying_after_it_answered_closes_the_connection(
    proxy: GroupProxy,
) -> None:
    """What the old master answered cannot be taken back: the client must reconnect
    (its gRPC state belongs to the dead server), and the proxy does not replay."""
    answered = asyncio.Event()

    async def answers_then_dies(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(1 << 16))
        await writer.drain()
        await answered.wait()
        writer.transport.abort()

    dying, dying_address = await _listen(answers_then_dies)
    proxy.set_master(dying_address)
    reader, writer = await _client(proxy)
    try:
        writer.write(b"hello")
        async with asyncio.timeout(10):
            assert await reader.readexactly(5) == b"hello"
        answered.set()
        async with asyncio.timeout(10):
            assert await reader.read(1) == b""  # closed, not replayed
    finally:
        writer.close()
        dying.close()
