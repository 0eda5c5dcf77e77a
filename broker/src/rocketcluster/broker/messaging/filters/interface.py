"""What the receive path needs from any compiled filter, whatever its language."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol


class FilterKind(StrEnum):
    """The subscription's filter language (the v5 protocol's FilterType)."""

    TAG = "TAG"
    SQL = "SQL"


class MessageFilter(Protocol):
    """A compiled subscription filter, applied in two stages on ReceiveMessage.

    `matches_code` runs on the consume-queue entry's tags code before the message is
    read from the commit log, so most non-matching messages cost no I/O; `matches`
    decides on the message itself and is the only authority (hashes collide).
    """

    @property
    def kind(self) -> FilterKind: ...

    @property
    def expression(self) -> str: ...

    def matches_code(self, code: int) -> bool: ...

    def matches(self, tag: str | None, properties: Mapping[str, str] | None = None) -> bool: ...
