"""One end of a front's socket pair as an asyncio protocol.

Frames going out are gathered for the rest of the loop turn and written in one call:
a front with many clients sends many CALLs per turn, a store process many REPLYs, and a
write per frame would cost a system call each. Frames coming in are handed to the
owner's ``on_frames`` in arrival order, all that one read brought at once (so the
owner can act on them together: the store process stores the SendMessage calls of one
read as one batch); a broken stream or a closed peer ends in ``on_lost`` once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from rocketcluster.broker.front.frames import FrameDecoder, FrameError, encode

OnFrames = Callable[[list[tuple[Any, ...]]], None]
OnLost = Callable[[str], None]


class Channel(asyncio.Protocol):
    def __init__(self, on_frames: OnFrames, on_lost: OnLost) -> None:
        self._on_frames = on_frames
        self._on_lost = on_lost
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._lost = False
        self._loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, sock: socket.socket, on_frames: OnFrames, on_lost: OnLost) -> Channel:
        """The channel over ``sock`` (one end of a connected socket pair)."""
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(lambda: cls(on_frames, on_lost), sock=sock)
        return channel

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._lose(f"broken channel: {exc}")
            return
        if frames:
            self._on_frames(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(f"the peer closed the channel ({exc})" if exc else "the peer closed the channel")

    # -- sending ---------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self._lost

    def send(self, frame: tuple[Any, ...]) -> None:
        """Queue ``frame``; it leaves with the others of this loop turn. Dropped once
        the channel is lost (the owner learns that from ``on_lost``)."""
        if self._lost:
            return
        self._out.append(encode(frame))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self._transport is not None and not self._lost:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def _lose(self, why: str) -> None:
        if self._lost:
            return
        self._lost = True
        if self._transport is not None:
            self._transport.abort()
        self._on_lost(why)
