"""Pages of the admin API's listings: a broker may hold 100,000 queues and thousands of
topics and groups, and one answer holding them all costs the broker seconds of its
event loop and the caller megabytes.

A listing is sorted by a key and cut after a cursor (``after``: the key of the last
item the caller has); a page that is not the last one says where the next begins in a
``Link: <...>; rel="next"`` header (RFC 8288, what httpx's ``response.links`` reads),
and every page gives the listing's size in ``X-Total-Count``. The body stays a JSON
list, as before the pages. Cursors, not page numbers: a topic created between two
pages does not shift the ones after it."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import urlencode

T = TypeVar("T")
K = TypeVar("K", str, tuple[str, int], tuple[str, str, int])

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    next_after: str | None  # the cursor of the next page; None on the last


def page_of(
    items: Iterable[T],
    key: Callable[[T], K],
    after: K | None,
    limit: int,
    cursor: Callable[[K], str],
) -> Page[T]:
    """The ``limit`` items whose keys follow ``after``, in key order."""
    ordered = sorted(items, key=key)
    keys: Sequence[K] = [key(item) for item in ordered]
    start = 0 if after is None else bisect.bisect_right(keys, after)
    chunk = ordered[start : start + limit]
    more = start + limit < len(ordered)
    return Page(chunk, len(ordered), cursor(keys[start + limit - 1]) if more else None)


def queue_page(
    topics: Sequence[tuple[str, int]], after: tuple[str, int] | None, limit: int
) -> Page[tuple[str, int]]:
    """The page of (topic, queue id) keys that ``page_of`` would cut from every queue
    of ``topics`` ((name, queue count) in name order), without listing the queues
    before the cursor: a broker with 100,000 queues answers each page in the time of
    its own rows."""
    names = [name for name, _ in topics]
    at, first_queue = 0, 0
    if after is not None:
        at = bisect.bisect_left(names, after[0])
        if at < len(names) and names[at] == after[0]:
            first_queue = after[1] + 1
    items: list[tuple[str, int]] = []
    for name, queues in topics[at:]:
        items += [(name, q) for q in range(first_queue, min(queues, first_queue + limit + 1))]
        first_queue = 0
        if len(items) > limit:
            break
    total = sum(queues for _, queues in topics)
    more = len(items) > limit
    return Page(items[:limit], total, queue_cursor(items[limit - 1]) if more else None)


def next_link(path: str, page: Page[T], limit: int) -> dict[str, str]:
    """The headers of a page: its listing's size, and the link to the next page."""
    headers = {"X-Total-Count": str(page.total)}
    if page.next_after is not None:
        query = urlencode({"after": page.next_after, "limit": limit})
        headers["Link"] = f'<{path}?{query}>; rel="next"'
    return headers


def queue_cursor(key: tuple[str, int]) -> str:
    """``topic:queueId`` (a topic name has no colon)."""
    return f"{key[0]}:{key[1]}"


def parse_queue_cursor(text: str) -> tuple[str, int]:
    topic, sep, qid = text.rpartition(":")
    if not sep or not topic or not qid.isdigit():
        raise ValueError(f"not a queue cursor (topic:queueId): {text!r}")
    return topic, int(qid)


def row_cursor(key: tuple[str, str, int]) -> str:
    """``group:topic:queueId`` (names have no colon)."""
    return f"{key[0]}:{key[1]}:{key[2]}"


def parse_row_cursor(text: str) -> tuple[str, str, int]:
    group, sep, rest = text.partition(":")
    if not sep or not group:
        raise ValueError(f"not a consumption cursor (group:topic:queueId): {text!r}")
    topic, qid = parse_queue_cursor(rest)
    return group, topic, qid
