"""Message filters the broker applies on ReceiveMessage: TAG sets and SQL92 predicates."""

from rocketcluster.broker.messaging.filters.cache import FilterCache
from rocketcluster.broker.messaging.filters.compile import compile_filter, filter_kind
from rocketcluster.broker.messaging.filters.errors import (
    FilterError,
    FilterSyntaxError,
    UnsupportedFilterKindError,
)
from rocketcluster.broker.messaging.filters.evaluate import evaluate
from rocketcluster.broker.messaging.filters.interface import FilterKind, MessageFilter
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits
from rocketcluster.broker.messaging.filters.parser import parse
from rocketcluster.broker.messaging.filters.printer import to_text
from rocketcluster.broker.messaging.filters.sql import TAGS_PROPERTY, SqlFilter, compile_sql_filter
from rocketcluster.broker.messaging.filters.tag import TagFilter, compile_tag_filter, tag_hash

__all__ = [
    "DEFAULT_LIMITS",
    "TAGS_PROPERTY",
    "FilterCache",
    "FilterError",
    "FilterKind",
    "FilterLimits",
    "FilterSyntaxError",
    "MessageFilter",
    "SqlFilter",
    "TagFilter",
    "UnsupportedFilterKindError",
    "compile_filter",
    "compile_sql_filter",
    "compile_tag_filter",
    "evaluate",
    "filter_kind",
    "parse",
    "tag_hash",
    "to_text",
]
