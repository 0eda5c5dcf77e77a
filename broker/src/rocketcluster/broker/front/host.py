"""The store process's side of its fronts' channels: every relayed call run by the
same servicers a single-process broker serves on its own port.

What a front has already done (admission, the signature and ACL check, decoding) is
not done again; what needs the store's state (the registry, POP, the store, the
forwarder of a slave) runs here, as it would under grpc.aio, with a context that
answers the servicers' questions from the call's frame: its metadata, its peer, the
time left until its deadline. A call whose front is lost or which the client cancels
is cancelled here as grpc.aio cancels a handler whose client goes away: an append
already made stays (the client, unanswered, sends again; at-least-once), nothing is
answered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.generated import consume_pb2 as cpb
from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel
from rocketcluster.broker.messaging.admission import (
    Undecodable,
    reply_with_status,
    undecodable_status,
)

log = logging.getLogger(__name__)

_CLOSED = object()
# Unary methods whose calls of one read the servicer takes together, and its method
# that does: (service, method) -> the servicer's batch method.
BATCHED: dict[tuple[str, str], str] = {
    (f.MESSAGING_SERVICE.full_name, "SendMessage"): "SendMessages",
    (f.MESSAGING_SERVICE.full_name, "AckMessage"): "AckMessages",
}


class RelayedContext:
    """What the servicers ask of a grpc.aio context, for a relayed call."""

    __slots__ = ("_deadline", "_metadata", "_peer")

    def __init__(self, metadata: tuple[tuple[str, Any], ...], peer: str, remaining: float):
        self._metadata = metadata
        self._peer = peer
        self._deadline = time.monotonic() + remaining if remaining >= 0 else None

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())


def _undecodable(method: f.Method, error: str) -> bytes:
    """The answer to request bytes that do not decode, as a single-process broker's
    admission gives it (a front that reads no field of a request passes them on)."""
    status_type = cpb.Status if method.service == f.CONSUME_SERVICE.full_name else pb.Status
    status = undecodable_status(method.name, Undecodable(error))
    answer: bytes = reply_with_status(method.response_type, status_type, status).SerializeToString()
    return answer


class _ClientStream:
    """A client-streaming call's messages, as the servicer's request iterator; it ends
    at the first that does not decode (``bad``: why)."""

    def __init__(self, decode: Callable[[bytes], Any]) -> None:
        self._decode = decode
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.bad: str | None = None

    def put(self, payload: Any) -> None:
        self._queue.put_nowait(payload)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            payload = await self._queue.get()
            if payload is _CLOSED:
                return
            try:
                request = self._decode(payload)
            except DecodeError as exc:
                self.bad = str(exc)
                return
            yield request


@dataclass
class FrontStats:
    """What a front said of itself (STATS) and what it relayed here."""

    connections: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    calls: int = 0  # relayed calls run here
    # Calls run in batches (see BATCHED), and the batches, by method: "calls" per
    # batch is how much one append or one journal wait carried.
    batched: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)


class FrontConnection:
    """One front's channel: its calls in progress, by the front's call id."""

    def __init__(
        self,
        servicers: dict[str, Any],
        on_hello: Callable[[FrontConnection], None],
        on_lost: Callable[[FrontConnection, str], None],
        observe: Callable[[str, int, float], None] | None,
    ) -> None:
        self._handlers = [getattr(servicers[m.service], m.name) for m in f.METHODS]
        # The calls of one read that the servicer takes together (BATCHED): one append,
        # one journal wait for all of them instead of one each.
        self._together: dict[int, tuple[str, Any]] = {}
        for (service, name), many in BATCHED.items():
            handler = getattr(servicers[service], many, None)
            if handler is not None:
                self._together[f.METHOD_INDEX[(service, name)]] = (name, handler)
        self._waiting: dict[int, list[tuple[int, Any, RelayedContext]]] = {}
        self._calls: dict[int, asyncio.Task[None]] = {}
        self._batched: dict[int, asyncio.Task[None]] = {}  # calls in a batch, by call id
        self._streams: dict[int, _ClientStream] = {}
        self._on_hello = on_hello
        self._on_lost_cb = on_lost
        self._observe = observe
        self.stats = FrontStats()
        self.channel: Channel | None = None
        self._gone = False
        self._loop = asyncio.get_running_loop()

    def attach(self, channel: Channel) -> None:
        self.channel = channel

    @property
    def in_progress(self) -> int:
        waiting = sum(len(calls) for calls in self._waiting.values())
        return len(self._calls) + len(self._batched) + waiting

    # -- frames in --------------------------------------------------------------------

    def on_frames(self, frames: list[tuple[Any, ...]]) -> None:
        """The frames of one read; the SendMessage calls among them stored together."""
        for frame in frames:
            try:
                self.on_frame(frame)
            except Exception:  # one bad frame must not take the channel down
                log.exception("front channel: frame %r failed", frame[:2])
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for index, calls in waiting.items():
                self._run_together(index, calls)

    def on_frame(self, frame: tuple[Any, ...]) -> None:
        kind = frame[0]
        if kind == f.CALL:
            self._begin(frame)
        elif kind == f.MESSAGE:
            stream = self._streams.get(frame[1])
            if stream is not None:
                stream.put(frame[2])
        elif kind == f.END:
            stream = self._streams.get(frame[1])
            if stream is not None:
                stream.put(_CLOSED)
        elif kind == f.CANCEL:
            task = self._calls.get(frame[1])
            if task is not None:
                task.cancel()
        elif kind == f.STATS:
            _, connections, refusals, observations = frame
            self.stats.connections = connections
            for limit, count in refusals.items():
                self.stats.refusals[limit] = self.stats.refusals.get(limit, 0) + count
            if self._observe is not None:
                for rpc, code, seconds in observations:
                    self._observe(rpc, code, seconds)
        elif kind == f.HELLO:
            _, index, _pid, digest = frame
            if digest != f.table_digest():
                self.lose(f"front {index} relays another method table ({digest})")
                return
            self._on_hello(self)
        else:
            log.warning("front channel: a frame of unknown kind %r", kind)

    def _begin(self, frame: tuple[Any, ...]) -> None:
        _, call, index, remaining, peer, metadata, payload = frame
        self.stats.calls += 1
        method = f.METHODS[index]
        context = RelayedContext(metadata, peer, remaining)
        handler = self._handlers[index]
        try:
            request = None if method.kind == f.BIDI else method.request_type.FromString(payload)
        except DecodeError as exc:  # the client's bytes, passed on undecoded
            if method.kind == f.UNARY:
                self._send((f.REPLY, call, _undecodable(method, str(exc))))
            else:
                self._send((f.MESSAGE, call, _undecodable(method, str(exc))))
                self._send((f.END, call, None))
            return
        if index in self._together:
            self._waiting.setdefault(index, []).append((call, request, context))
            return  # run with the others of this read (on_frames)
        if method.kind == f.UNARY:
            coro = self._unary(call, handler, request, context)
        elif method.kind == f.SERVER_STREAM:
            coro = self._streaming(call, handler(request, context))
        else:
            stream = self._streams[call] = _ClientStream(method.request_type.FromString)
            coro = self._streaming(call, handler(stream, context), stream, method)
        task = self._loop.create_task(coro)
        self._calls[call] = task
        task.add_done_callback(functools.partial(self._done, call))

    def _run_together(self, index: int, calls: list[tuple[int, Any, RelayedContext]]) -> None:
        if self._gone:
            return
        name, handler = self._together[index]
        self.stats.batched[name] = self.stats.batched.get(name, 0) + len(calls)
        self.stats.batches[name] = self.stats.batches.get(name, 0) + 1
        task = self._loop.create_task(self._batch(handler, calls))
        for call, _, _ in calls:  # a CANCEL of one leaves the others' batch alone
            self._batched[call] = task
        task.add_done_callback(functools.partial(self._batch_done, [c for c, _, _ in calls]))

    async def _batch(self, handler: Any, calls: list[tuple[int, Any, RelayedContext]]) -> None:
        try:
            responses = await handler([(r, c) for _, r, c in calls])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("relayed calls failed")
            for call, _, _ in calls:
                self._send((f.END, call, f"the store process failed the call: {exc}"))
            return
        for (call, _, _), response in zip(calls, responses, strict=True):
            self._send((f.REPLY, call, response.SerializeToString()))

    def _batch_done(self, calls: list[int], _task: object = None) -> None:
        for call in calls:
            self._batched.pop(call, None)

    def _done(self, call: int, _task: object = None) -> None:
        self._calls.pop(call, None)
        self._streams.pop(call, None)

    # -- running a call -----------------------------------------------------------------

    def _send(self, frame: tuple[Any, ...]) -> None:
        if self.channel is not None:
            self.channel.send(frame)

    async def _unary(self, call: int, handler: Any, request: Any, context: Any) -> None:
        try:
            response = await handler(request, context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the servicers answer their own errors: this is ours
            log.exception("relayed call %d failed", call)
            self._send((f.END, call, f"the store process failed the call: {exc}"))
            return
        self._send((f.REPLY, call, response.SerializeToString()))

    async def _streaming(
        self,
        call: int,
        responses: AsyncIterator[Any],
        requests: _ClientStream | None = None,
        method: f.Method | None = None,
    ) -> None:
        error = None
        try:
            async for response in responses:
                self._send((f.MESSAGE, call, response.SerializeToString()))
            if requests is not None and requests.bad is not None and method is not None:
                # The stream ended at bytes that are not a command: say so.
                self._send((f.MESSAGE, call, _undecodable(method, requests.bad)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("relayed stream %d failed", call)
            error = f"the store process failed the call: {exc}"
        self._send((f.END, call, error))

    # -- the end -----------------------------------------------------------------------

    def lose(self, why: str) -> None:
        """The front is gone (or broken): cancel what it asked for, forget it."""
        if self._gone:
            return
        self._gone = True
        for task in [*self._calls.values(), *self._batched.values()]:
            task.cancel()
        self._calls.clear()
        self._batched.clear()
        self._waiting.clear()
        self._streams.clear()
        if self.channel is not None and not self.channel.lost:
            self.channel.close()
        self._on_lost_cb(self, why)
