"""Reading a header of a gRPC call: grpc.aio hands metadata values over as ``str``, or
as ``bytes`` for binary headers and from some transports; every reader wants text."""

from __future__ import annotations

from typing import Any


def header(context: Any, key: str) -> str:
    """The value of ``key`` in the call's metadata ("" when absent)."""
    for k, value in context.invocation_metadata() or ():
        if k == key:
            return value if isinstance(value, str) else bytes(value).decode(errors="replace")
    return ""
