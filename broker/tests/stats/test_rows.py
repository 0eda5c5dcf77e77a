"""The rows a broker builds write the JSON the format's models write, byte for byte,
for every field each can hold."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from rocketcluster.api.stats import ConsumerStats, QueueStats, SegmentStats
from rocketcluster.broker.stats.rows import (
    ROW_MODELS,
    ConsumerRow,
    QueueRow,
    SegmentRow,
    data_fields,
)

names = st.text(st.sampled_from('abcXYZ09_-%|é"\\'), min_size=1, max_size=20)
counts = st.integers(min_value=0, max_value=2**62)
times = st.none() | st.integers(min_value=0, max_value=2**45)


def _same_as_model(row: Any, model: type[BaseModel]) -> None:
    values = {name: getattr(row, name) for name in data_fields(type(row))}
    expected = model(**values).model_dump_json(by_alias=True).encode()
    assert row.json == expected


def test_every_row_has_its_models_fields_in_its_order() -> None:
    for row_type, model in ROW_MODELS:
        assert data_fields(row_type) == tuple(model.model_fields), row_type


@given(names, counts, counts, counts, times, times, times)
def test_queue_rows(
    topic: str, qid: int, lo: int, hi: int, head: int | None, tail: int | None, read: int | None
) -> None:
    _same_as_model(QueueRow(topic, qid, lo, hi, head, tail, read), QueueStats)


@given(names, names, counts, counts, counts, counts, times, counts, counts)
def test_consumer_rows(
    group: str,
    topic: str,
    qid: int,
    committed: int,
    lo: int,
    hi: int,
    at: int | None,
    inflight: int,
    retry: int,
) -> None:
    row = ConsumerRow(group, topic, qid, committed, lo, hi, at, inflight, retry)
    _same_as_model(row, ConsumerStats)


@given(names, counts, counts, counts, counts, times, times, times, st.booleans())
def test_segment_rows(
    topic: str,
    qid: int,
    segment: int,
    size: int,
    messages: int,
    first: int | None,
    last: int | None,
    read: int | None,
    tiered: bool,
) -> None:
    row = SegmentRow(topic, qid, segment, size, messages, first, last, read, tiered)
    _same_as_model(row, SegmentStats)


def test_a_row_is_small() -> None:
    """What a kept row costs: its slots, not a model's dict and field set."""
    row = QueueRow("orders", 3, 0, 10, 1_700_000_000_000, 1_700_000_000_500, None)
    assert not hasattr(row, "__dict__")
    assert row.json.startswith(b'{"topic":"orders","queueId":3,"minOffset":0,')
