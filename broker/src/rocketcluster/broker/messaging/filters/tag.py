"""TAG filters: `*` (or empty) for everything, or `a || b || c` for a set of tags."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from rocketcluster.broker.messaging.filters.errors import FilterSyntaxError
from rocketcluster.broker.messaging.filters.interface import FilterKind
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits

MATCH_ALL = "*"
TAG_SEPARATOR = "||"


def tag_hash(tag: str | None) -> int:
    """The consume queue's "tags code" for `tag` (0 when untagged).

    Must equal `rocketcluster.broker.store.record.tags_code`; it is restated here so
    the filters stay a leaf package that imports nothing of the store (a test pins
    the two together).
    """
    return zlib.crc32(tag.encode()) if tag else 0


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A compiled TAG expression; `tags` is None when it matches every message."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int] | None

    @property
    def kind(self) -> FilterKind:
        return FilterKind.TAG

    def matches_code(self, code: int) -> bool:
        """Prefilter on the hash only: may say yes for a colliding tag, never wrongly no."""
        return self.codes is None or code in self.codes

    def matches(self, tag: str | None, properties: Mapping[str, str] | None = None) -> bool:
        """The exact decision; untagged messages are selected only by `*`."""
        return self.tags is None or (bool(tag) and tag in self.tags)


def compile_tag_filter(expression: str, limits: FilterLimits = DEFAULT_LIMITS) -> TagFilter:
    """Compile like RocketMQ's FilterAPI: split on `||`, trim, drop empty pieces.

    Unlike RocketMQ, a blank expression means `*` and a `*` piece anywhere in the list
    means everything; an expression with only separators (`||`) is an error rather
    than a subscription that silently matches nothing.
    """
    if len(expression) > limits.max_length:
        raise FilterSyntaxError(
            expression,
            limits.max_length,
            f"expression is {len(expression)} characters long; the limit is {limits.max_length}",
        )
    stripped = expression.strip()
    if not stripped or stripped == MATCH_ALL:
        return TagFilter(expression, None, None)
    tags = frozenset(piece.strip() for piece in stripped.split(TAG_SEPARATOR)) - {""}
    for tag in tags:
        if "|" in tag:
            raise FilterSyntaxError(
                expression,
                expression.find(tag) + tag.index("|"),
                f"tag {tag!r} contains '|'; tags cannot, and a list is separated by '||'",
            )
    if not tags:
        raise FilterSyntaxError(
            expression, 0, "TAG expression lists no tags; use '*' to receive every message"
        )
    if MATCH_ALL in tags:
        return TagFilter(expression, None, None)
    return TagFilter(expression, tags, frozenset(tag_hash(tag) for tag in tags))
