"""The front's side of the channel: a servicer whose every method hands its call to
the store process and answers with what comes back.

``RelayServicer`` has the methods of MessagingService and ConsumeService; the client
port's admission and auth wrap it exactly as they wrap the real servicers in a
single-process broker, so a refused call never crosses the channel. A relayed call
carries the request's bytes (as they came when no auth check reads them; decoded for
the check and encoded again when one does), the call's metadata and peer, and its
remaining deadline; the answer comes back as bytes that
grpc.aio sends as they are (``admission.handler(raw_replies=True)``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel

_END = object()


class RelayError(Exception):
    """The store process could not run the call (not a status it answered)."""


class StoreLink:
    """The calls this front has handed to its store process, by call id."""

    def __init__(self) -> None:
        self.channel: Channel | None = None
        self._ids = itertools.count(1)
        self._replies: dict[int, asyncio.Future[bytes]] = {}
        self._streams: dict[int, asyncio.Queue[Any]] = {}

    def attach(self, channel: Channel) -> None:
        self.channel = channel

    def send(self, frame: tuple[Any, ...]) -> None:
        assert self.channel is not None
        self.channel.send(frame)

    def on_frame(self, frame: tuple[Any, ...]) -> None:
        kind, call = frame[0], frame[1]
        if kind == f.REPLY:
            future = self._replies.get(call)
            if future is not None and not future.done():
                future.set_result(frame[2])
        elif kind == f.MESSAGE:
            queue = self._streams.get(call)
            if queue is not None:
                queue.put_nowait(frame[2])
        elif kind == f.END:
            error = frame[2]
            future = self._replies.get(call)
            if future is not None and not future.done():
                future.set_exception(RelayError(error or "the call ended without an answer"))
            queue = self._streams.get(call)
            if queue is not None:
                queue.put_nowait(RelayError(error) if error else _END)

    def _begin(self, index: int, payload: bytes | None, context: Any) -> int:
        call = next(self._ids)
        remaining = context.time_remaining()
        metadata = tuple((k, v) for k, v in context.invocation_metadata() or ())
        self.send(
            (
                f.CALL,
                call,
                index,
                -1.0 if remaining is None else float(remaining),
                context.peer(),
                metadata,
                payload,
            )
        )
        return call

    async def unary(self, index: int, request: Any, context: Any) -> bytes:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        call = self._begin(index, _encoded(request), context)
        self._replies[call] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.send((f.CANCEL, call))
            raise
        finally:
            del self._replies[call]

    async def stream(
        self, index: int, request: Any, requests: AsyncIterator[Any] | None, context: Any
    ) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        payload = None if request is None else _encoded(request)
        call = self._begin(index, payload, context)
        self._streams[call] = queue
        pump = None
        if requests is not None:
            pump = asyncio.get_running_loop().create_task(self._pump(call, requests))
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, RelayError):
                    finished = True
                    raise item
                yield item
        finally:
            del self._streams[call]
            if pump is not None:
                pump.cancel()
            if not finished:  # the client went away first
                self.send((f.CANCEL, call))

    async def _pump(self, call: int, requests: AsyncIterator[Any]) -> None:
        """The client's messages of a client-streaming call, on to the store process."""
        try:
            async for request in requests:
                self.send((f.MESSAGE, call, _encoded(request)))
        except grpc.aio.AioRpcError:
            pass
        self.send((f.END, call, None))


def _encoded(request: Any) -> bytes:
    """A request's bytes: as they came (the front does not decode what no auth check
    reads), or encoded again."""
    return request if type(request) is bytes else request.SerializeToString()


def _unary(link: StoreLink, index: int) -> Callable[[Any, Any], Awaitable[bytes]]:
    async def relay(request: Any, context: Any) -> bytes:
        try:
            return await link.unary(index, request, context)
        except RelayError as exc:
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))
            raise  # abort raises; this satisfies the type checker

    return relay


def _streaming(
    link: StoreLink, index: int, client_streaming: bool
) -> Callable[[Any, Any], AsyncIterator[bytes]]:
    async def relay(request: Any, context: Any) -> AsyncIterator[bytes]:
        requests = request if client_streaming else None
        single = None if client_streaming else request
        try:
            async for payload in link.stream(index, single, requests, context):
                yield payload
        except RelayError as exc:
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))

    return relay


class RelayServicer:
    """The methods of ``service`` (a full service name), each relaying its call."""

    def __init__(self, link: StoreLink, service: str) -> None:
        for index, method in enumerate(f.METHODS):
            if method.service != service:
                continue
            relay: Any
            if method.kind == f.UNARY:
                relay = _unary(link, index)
            else:
                relay = _streaming(link, index, method.kind == f.BIDI)
            setattr(self, method.name, relay)
