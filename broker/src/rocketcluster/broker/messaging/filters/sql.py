"""SQL92 filters: a parsed predicate evaluated over a message's properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketcluster.broker.messaging.filters.evaluate import evaluate
from rocketcluster.broker.messaging.filters.interface import FilterKind
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits
from rocketcluster.broker.messaging.filters.parser import parse
from rocketcluster.broker.messaging.filters.syntax import Predicate

TAGS_PROPERTY = "TAGS"
_NO_PROPERTIES: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled SQL92 expression; the message's tag is visible as property `TAGS`."""

    expression: str
    predicate: Predicate

    @property
    def kind(self) -> FilterKind:
        return FilterKind.SQL

    def matches_code(self, code: int) -> bool:
        """Always True: a SQL filter needs the properties, which the tags code lacks."""
        return True

    def matches(self, tag: str | None, properties: Mapping[str, str] | None = None) -> bool:
        """Selected only when the predicate is TRUE (FALSE and UNKNOWN both reject)."""
        props = _NO_PROPERTIES if properties is None else properties

        def lookup(name: str) -> str | None:
            if name == TAGS_PROPERTY and tag:
                return tag
            return props.get(name)

        return evaluate(self.predicate, lookup) is True


def compile_sql_filter(expression: str, limits: FilterLimits = DEFAULT_LIMITS) -> SqlFilter:
    """Parse once per subscription; raises FilterSyntaxError for a malformed expression."""
    return SqlFilter(expression, parse(expression, limits))
