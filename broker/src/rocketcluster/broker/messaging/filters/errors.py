"""Typed filter errors that carry their data, so the gRPC layer can answer precisely.

Every error here maps to RocketMQ's ILLEGAL_FILTER_EXPRESSION: the subscriber sent
something the broker cannot apply, and retrying the same expression will not help.
"""

from __future__ import annotations

_EXCERPT_CHARS = 24


class FilterError(ValueError):
    """Base class: the subscription's filter cannot be compiled; fix the expression."""


class UnsupportedFilterKindError(FilterError):
    """The filter type is neither TAG nor SQL (e.g. a newer client's extension)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"unsupported filter type {kind!r}; use TAG or SQL")


class FilterSyntaxError(FilterError):
    """A malformed expression, with the 0-based character position of the problem.

    The message names the problem and shows the text around the position with a
    `>>` marker, so a user reading a client-side exception can fix it without us.
    """

    def __init__(self, expression: str, position: int, reason: str) -> None:
        self.expression = expression
        self.position = position
        self.reason = reason
        super().__init__(f"{reason} (at position {position}: {_excerpt(expression, position)})")


def _excerpt(expression: str, position: int) -> str:
    """Bounded context around `position`: expressions may be kilobytes long."""
    start = max(0, position - _EXCERPT_CHARS)
    end = min(len(expression), position + _EXCERPT_CHARS)
    before = ("..." if start > 0 else "") + expression[start:position]
    after = expression[position:end] + ("..." if end < len(expression) else "")
    return f"{before!r} >> {after!r}"
