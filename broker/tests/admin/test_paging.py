"""The admin listings' pages (broker/admin/paging.py): walking the pages by their
cursors yields every item once, in key order, whatever the page size and whatever
is created or deleted between two pages."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketcluster.broker.admin.paging import (
    Page,
    next_link,
    page_of,
    parse_queue_cursor,
    parse_row_cursor,
    queue_cursor,
    queue_page,
    row_cursor,
)

names = st.text(alphabet="abcXYZ09_-%|", min_size=1, max_size=6)


def _walk(items: set[str], limit: int, between: list[set[str]] | None = None) -> list[str]:
    """Every page's items, the set changed to ``between[i]`` before page i+1."""
    seen: list[str] = []
    after: str | None = None
    current = items
    for turn in range(len(items) + sum(map(len, between or [])) + 2):
        page: Page[str] = page_of(current, lambda n: n, after, limit, str)
        seen += page.items
        if page.next_after is None:
            return seen
        after = page.next_after
        if between and turn < len(between):
            current = between[turn]
    raise AssertionError("the pages never ended")


@given(st.sets(names, max_size=60), st.integers(1, 70))
def test_the_pages_hold_every_item_once_in_order(items: set[str], limit: int) -> None:
    assert _walk(items, limit) == sorted(items)


@given(st.sets(names, min_size=1, max_size=40), st.integers(1, 10), st.sets(names, max_size=20))
def test_a_change_between_pages_moves_no_other_item(
    items: set[str], limit: int, changed: set[str]
) -> None:
    """Items that exist throughout are seen exactly once; the ones created or deleted
    meanwhile at most once (a cursor, not a page number, marks the place)."""
    after_change = (items - changed) | (changed - items)
    seen = _walk(items, limit, [after_change])
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert items & after_change <= set(seen)


def test_a_page_says_where_the_next_begins_and_how_many_there_are() -> None:
    keys = [(t, q) for t in ("b", "a") for q in range(3)]
    page = page_of(keys, lambda k: k, None, 4, queue_cursor)
    assert page.items == [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    assert page.total == 6 and page.next_after == "b:0"
    headers = next_link("/v1/queues", page, 4)
    assert headers["X-Total-Count"] == "6"
    link = headers["Link"]
    assert link.endswith('>; rel="next"')
    url = urlsplit(link[1 : link.index(">")])
    assert url.path == "/v1/queues"
    assert parse_qs(url.query) == {"after": ["b:0"], "limit": ["4"]}
    last = page_of(keys, lambda k: k, parse_queue_cursor("b:0"), 4, queue_cursor)
    assert last.items == [("b", 1), ("b", 2)] and last.next_after is None
    assert "Link" not in next_link("/v1/queues", last, 4)


@pytest.mark.parametrize("bad", ["", "topic", "topic:", ":3", "topic:x", "topic:-1"])
def test_a_malformed_queue_cursor_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="queue cursor"):
        parse_queue_cursor(bad)


def test_cursors_read_back() -> None:
    assert parse_queue_cursor(queue_cursor(("%RETRY%g|x", 7))) == ("%RETRY%g|x", 7)
    assert parse_row_cursor(row_cursor(("g", "t", 12))) == ("g", "t", 12)
    with pytest.raises(ValueError, match="consumption cursor"):
        parse_row_cursor("no-colon")
    with pytest.raises(ValueError, match="queue cursor"):
        parse_row_cursor("g:t")


@given(
    st.dictionaries(names, st.integers(0, 9), max_size=12),
    st.integers(1, 25),
    st.one_of(st.none(), st.tuples(names, st.integers(-1, 10))),
)
def test_a_queue_page_is_the_page_of_every_queue(
    topics: dict[str, int], limit: int, after: tuple[str, int] | None
) -> None:
    """``queue_page`` skips to the cursor; ``page_of`` over every queue is the rule."""
    ordered = sorted(topics.items())
    every = [(name, q) for name, queues in ordered for q in range(queues)]
    assert queue_page(ordered, after, limit) == page_of(
        every, lambda k: k, after, limit, queue_cursor
    )
