"""A small LRU of compiled filters, owned by whoever serves ReceiveMessage.

Consumers send their filter with every receive call, and a few subscriptions account
for nearly all calls, so caching the compiled form saves a parse per call. The cache
is an object the caller creates (one per broker), not module state, so tests and
simulated brokers never share it. Errors are not cached: bad expressions are rare
and re-raising one exception object from many calls would tangle tracebacks.
Not thread-safe; it lives on the broker's single asyncio loop.
"""

from __future__ import annotations

from collections import OrderedDict

from rocketcluster.broker.messaging.filters.compile import compile_filter, filter_kind
from rocketcluster.broker.messaging.filters.interface import FilterKind, MessageFilter
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits


class FilterCache:
    """`get` returns the compiled filter for (kind, expression), compiling on a miss."""

    def __init__(self, capacity: int = 256, limits: FilterLimits = DEFAULT_LIMITS) -> None:
        if capacity < 1:
            raise ValueError(f"FilterCache capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._limits = limits
        self._entries: OrderedDict[tuple[FilterKind, str], MessageFilter] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, kind: FilterKind | str, expression: str) -> MessageFilter:
        """Raises FilterError like `compile_filter` when the expression is malformed."""
        key = (filter_kind(kind), expression)
        cached = self._entries.get(key)
        if cached is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return cached
        self.misses += 1
        compiled = compile_filter(key[0], expression, self._limits)
        self._entries[key] = compiled
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return compiled

    def clear(self) -> None:
        self._entries.clear()
