"""The one entry point the receive path calls to turn a subscription into a filter."""

from __future__ import annotations

from rocketcluster.broker.messaging.filters.errors import UnsupportedFilterKindError
from rocketcluster.broker.messaging.filters.interface import FilterKind, MessageFilter
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits
from rocketcluster.broker.messaging.filters.sql import compile_sql_filter
from rocketcluster.broker.messaging.filters.tag import compile_tag_filter


def filter_kind(kind: FilterKind | str) -> FilterKind:
    """Accept the enum or its name in any case ("TAG", "sql")."""
    try:
        return FilterKind(kind.upper())
    except ValueError:
        raise UnsupportedFilterKindError(str(kind)) from None


def compile_filter(
    kind: FilterKind | str, expression: str, limits: FilterLimits = DEFAULT_LIMITS
) -> MessageFilter:
    """Compile `expression` as a TAG or SQL filter.

    Raises FilterSyntaxError (malformed expression) or UnsupportedFilterKindError; both
    are FilterError, which the gRPC layer reports as ILLEGAL_FILTER_EXPRESSION.
    """
    if filter_kind(kind) is FilterKind.TAG:
        return compile_tag_filter(expression, limits)
    return compile_sql_filter(expression, limits)
