"""The rows a broker builds for its stats snapshots: compact, each with its JSON.

``api/stats.py`` defines the format with pydantic models, which readers validate
bodies against. A broker keeps the last snapshot's rows until the next one, to reuse
the rows nothing changed in (issue #27: with 100,000 queues, building and encoding
every row again took most of a snapshot's 10 s of CPU). Kept as models, with their
JSON beside them, those rows cost ~1 KB each: 300 MB more RSS at 100,000 queues. So
a broker builds these instead: slotted dataclasses with the same fields as the models,
and their JSON written once, when the row is built — byte for byte what the model
writes (``broker/tests/stats/test_rows.py`` checks every kind against its model).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import ClassVar

from pydantic import BaseModel

from rocketcluster.api.stats import ConsumerStats, QueueStats, SegmentStats

Encoder = Callable[[object], bytes]


def _value(value: object) -> str:
    """One field's value in JSON, as pydantic writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"a stats row holds only str, int, bool and None, not {type(value)}")


def _encoder(model: type[BaseModel]) -> Encoder:
    """Writes an object with ``model``'s fields as the model's compact JSON does
    (field order, camelCase keys)."""
    names = tuple(model.model_fields)
    keys = tuple(json.dumps(model.model_fields[n].alias or n) + ":" for n in names)

    def encode(row: object) -> bytes:
        parts = (k + _value(getattr(row, n)) for k, n in zip(keys, names, strict=True))
        return ("{" + ",".join(parts) + "}").encode()

    return encode


@dataclass(frozen=True, slots=True)
class _Row:
    """What every row has besides its fields: its JSON, written by ``_ENCODE`` (the
    encoder of the model the row stands for) when the row is built."""

    _ENCODE: ClassVar[Encoder]
    json: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "json", type(self)._ENCODE(self))


@dataclass(frozen=True, slots=True)
class QueueRow(_Row):
    """A :class:`~rocketcluster.api.stats.QueueStats` row."""

    _ENCODE: ClassVar[Encoder] = _encoder(QueueStats)
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    head_store_time: int | None = None
    tail_store_time: int | None = None
    last_read_time: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerRow(_Row):
    """A :class:`~rocketcluster.api.stats.ConsumerStats` row."""

    _ENCODE: ClassVar[Encoder] = _encoder(ConsumerStats)
    consumer_group: str
    topic: str
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    committed_store_time: int | None = None
    inflight: int = 0
    retry: int = 0


@dataclass(frozen=True, slots=True)
class SegmentRow(_Row):
    """A :class:`~rocketcluster.api.stats.SegmentStats` row."""

    _ENCODE: ClassVar[Encoder] = _encoder(SegmentStats)
    topic: str
    queue_id: int
    segment: int
    bytes: int
    messages: int
    min_store_time: int | None = None
    max_store_time: int | None = None
    last_read_time: int | None = None
    tiered: bool = False


# Which model each row stands for (the tests hold one to the other).
ROW_MODELS: tuple[tuple[type, type[BaseModel]], ...] = (
    (QueueRow, QueueStats),
    (ConsumerRow, ConsumerStats),
    (SegmentRow, SegmentStats),
)


def data_fields(row_type: type) -> tuple[str, ...]:
    """A row type's fields, without its JSON."""
    return tuple(f.name for f in fields(row_type) if f.name != "json")
