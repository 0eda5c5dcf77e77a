"""The frames between a front process and its store process, and the relayed methods.

A frame on the socket is a 4-byte little-endian length and a ``marshal``-ed tuple whose
first item is its kind. ``marshal`` is the fastest codec of Python's own tuples, bytes
and strings (about a microsecond a frame); it is safe here because both ends are the
same installation and the socket is a private socket pair, never a listening address.

Front → store:

- ``CALL  (kind, call, method, remaining_s, peer, metadata, payload)``: a call begins;
  ``remaining_s`` is its deadline (-1.0: none), ``payload`` the request's bytes (None
  for a client-streaming method, whose messages follow as MESSAGE frames);
- ``MESSAGE (kind, call, payload)``: the client's next message (Telemetry);
- ``END (kind, call, None)``: the client has sent its last message;
- ``CANCEL (kind, call)``: the client is gone (cancelled, deadline passed);
- ``HELLO (kind, index, pid, methods)``: the front serves (``methods``: its table's
  digest, so two installations never pair);
- ``STATS (kind, connections, refusals, observations)``: what the front's admission
  and auth saw since the last STATS.

Store → front:

- ``CONFIG (kind, config_json, log_level)``: the first frame: what to serve;
- ``REPLY (kind, call, payload)``: a unary call's answer (the call ends);
- ``MESSAGE (kind, call, payload)``: a streaming call's next response;
- ``END (kind, call, error)``: a streaming call ends (``error``: None, or why the
  store process could not run the call at all).
"""

from __future__ import annotations

import hashlib
import marshal
import struct
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.descriptor import ServiceDescriptor
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.generated import consume_pb2 as cpb

CALL: Final = 1
MESSAGE: Final = 2
END: Final = 3
CANCEL: Final = 4
HELLO: Final = 5
STATS: Final = 6
CONFIG: Final = 7
REPLY: Final = 8

LENGTH = struct.Struct("<I")
# A frame larger than any request the client port admits (max_message_bytes plus the
# margin around it) or any answer (a ReceiveBatch is at most 64 MiB) is a broken peer.
MAX_FRAME_BYTES = 256 * 1024 * 1024

UNARY: Final = "unary"
SERVER_STREAM: Final = "server_stream"
BIDI: Final = "bidi"


class FrameError(ValueError):
    """Bytes on the channel that are not frames: the peer is broken or not ours."""


def encode(frame: tuple[Any, ...]) -> bytes:
    body = marshal.dumps(frame)
    return LENGTH.pack(len(body)) + body


class FrameDecoder:
    """Frames out of a byte stream that arrives in arbitrary pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        buffer = self._buffer
        buffer += data
        frames: list[tuple[Any, ...]] = []
        at = 0
        end = len(buffer)
        while end - at >= LENGTH.size:
            (size,) = LENGTH.unpack_from(buffer, at)
            if size > MAX_FRAME_BYTES:
                raise FrameError(f"a frame of {size} bytes (the most is {MAX_FRAME_BYTES})")
            if end - at - LENGTH.size < size:
                break
            start = at + LENGTH.size
            try:
                frame = marshal.loads(buffer[start : start + size])
            except (ValueError, EOFError, TypeError) as exc:
                raise FrameError(f"a frame that does not decode: {exc}") from exc
            if type(frame) is not tuple or not frame:
                raise FrameError(f"a frame that is not a tuple: {type(frame).__name__}")
            frames.append(frame)
            at = start + size
        if at:
            del buffer[:at]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet complete."""
        return len(self._buffer)


@dataclass(frozen=True)
class Method:
    """One relayed RPC: its index in the table is what a CALL names."""

    service: str  # the full service name
    name: str
    kind: str  # UNARY, SERVER_STREAM or BIDI
    request_type: Any
    response_type: Any


def _methods(service: ServiceDescriptor, messages: Any) -> list[Method]:
    table = []
    for method in service.methods:
        if method.client_streaming and not method.server_streaming:
            raise ValueError(f"{service.full_name}.{method.name}: client streaming")
        kind = (
            BIDI if method.client_streaming else SERVER_STREAM if method.server_streaming else UNARY
        )
        table.append(
            Method(
                service.full_name,
                method.name,
                kind,
                getattr(messages, method.input_type.name),
                getattr(messages, method.output_type.name),
            )
        )
    return table


MESSAGING_SERVICE: Final = spb.DESCRIPTOR.services_by_name["MessagingService"]
CONSUME_SERVICE: Final = cpb.DESCRIPTOR.services_by_name["ConsumeService"]
METHODS: Final[tuple[Method, ...]] = (
    *_methods(MESSAGING_SERVICE, spb),
    *_methods(CONSUME_SERVICE, cpb),
)
METHOD_INDEX: Final[dict[tuple[str, str], int]] = {
    (m.service, m.name): i for i, m in enumerate(METHODS)
}


def table_digest(methods: tuple[Method, ...] = METHODS) -> str:
    """What HELLO carries: a front and a store process pair only on the same table."""
    text = "\n".join(f"{m.service}/{m.name}/{m.kind}" for m in methods)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
