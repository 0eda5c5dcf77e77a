"""The stats snapshots brokers publish to a system topic, read back by the Spark health
jobs (``rocketcluster.jobs``).

Why a topic and not a scrape: the history then lives on the cluster itself, survives
restarts of every reader and writer, is replicated to the slaves like any data, and is
trimmed by the same retention. A master appends one snapshot every
``statsIntervalSeconds`` to queue 0 of :data:`STATS_TOPIC`; a large broker splits one
snapshot into several messages of at most :data:`MAX_ROWS_PER_MESSAGE` rows that share
its ``time``. Bodies are JSON (camelCase keys, times in epoch milliseconds) so any
language can read them with the official clients; :func:`decode_snapshot` refuses a
body it cannot read with the reason, never guesses.
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rocketcluster.api.names import SYSTEM_TOPIC_PREFIX

STATS_TOPIC: Final = f"{SYSTEM_TOPIC_PREFIX}BROKER_STATS"
STATS_FORMAT_VERSION: Final = 1
MAX_ROWS_PER_MESSAGE: Final = 1000
DEFAULT_STATS_INTERVAL_SECONDS: Final = 30.0


class _Row(BaseModel):
    model_config = ConfigDict(
        extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class QueueStats(_Row):
    """One consume queue: its offsets and how old its head and tail are."""

    topic: str
    queue_id: int = Field(ge=0)
    min_offset: int = Field(ge=0)
    max_offset: int = Field(ge=0)
    # Store times of the oldest kept and the newest message; None when the queue is empty.
    head_store_time: int | None = None
    tail_store_time: int | None = None
    # The last time a consumer was served from this queue (since the broker started).
    last_read_time: int | None = None


class ConsumerStats(_Row):
    """One consumer group on one queue: where it is and what it holds."""

    consumer_group: str
    topic: str
    queue_id: int = Field(ge=0)
    committed_offset: int = Field(ge=0)
    # The queue's offsets at the same moment: a committed offset below min_offset means
    # retention deleted messages this group never read.
    min_offset: int = Field(default=0, ge=0)
    max_offset: int = Field(ge=0)
    # Store time of the message at the committed offset (the oldest not consumed);
    # None when the group is caught up: the exact input of lag in time.
    committed_store_time: int | None = None
    inflight: int = Field(default=0, ge=0)
    # Messages of this group waiting in its retry topic (%RETRY%<group>).
    retry: int = Field(default=0, ge=0)


class SegmentStats(_Row):
    """The bytes one queue holds in one commit-log segment: what tiering would move."""

    topic: str
    queue_id: int = Field(ge=0)
    segment: int = Field(ge=0, description="the segment's start offset (its file name)")
    bytes: int = Field(ge=0)
    messages: int = Field(ge=0)
    min_store_time: int | None = None
    max_store_time: int | None = None
    # The last time any read was served from this segment (since the broker started).
    last_read_time: int | None = None
    # Whether the tier already holds this queue's part of the segment (tiered storage
    # on, and uploaded): local retention may delete it without losing anything.
    tiered: bool = False


class StatsSnapshot(_Row):
    v: int = STATS_FORMAT_VERSION
    time: int = Field(ge=0, description="when the snapshot was taken, epoch ms")
    cluster: str
    broker_group: str
    broker_id: int = Field(ge=0)
    queues: list[QueueStats] = Field(default_factory=list)
    consumers: list[ConsumerStats] = Field(default_factory=list)
    segments: list[SegmentStats] = Field(default_factory=list)


class StatsFormatError(ValueError):
    """A stats body that is not a snapshot this version can read."""


def encode_snapshot(snapshot: StatsSnapshot) -> list[bytes]:
    """The message bodies of one snapshot: rows split so that no body holds more than
    MAX_ROWS_PER_MESSAGE of them (each body is a whole snapshot with a share of rows)."""
    rows: list[tuple[str, BaseModel]] = [
        *(("queues", q) for q in snapshot.queues),
        *(("consumers", c) for c in snapshot.consumers),
        *(("segments", s) for s in snapshot.segments),
    ]
    head = snapshot.model_dump(by_alias=True, exclude={"queues", "consumers", "segments"})
    bodies = []
    for start in range(0, max(len(rows), 1), MAX_ROWS_PER_MESSAGE):
        part: dict[str, list[object]] = {"queues": [], "consumers": [], "segments": []}
        for kind, row in rows[start : start + MAX_ROWS_PER_MESSAGE]:
            part[kind].append(row.model_dump(by_alias=True))
        bodies.append(json.dumps({**head, **part}, separators=(",", ":")).encode())
    return bodies


def decode_snapshot(body: bytes) -> StatsSnapshot:
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StatsFormatError(f"stats body is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise StatsFormatError("stats body is not a JSON object")
    version = raw.get("v")
    if version != STATS_FORMAT_VERSION:
        raise StatsFormatError(
            f"stats format v{version} is not v{STATS_FORMAT_VERSION}: "
            "upgrade the reader (rocketcluster-jobs) to the brokers' release"
        )
    try:
        return StatsSnapshot.model_validate(raw)
    except ValidationError as exc:
        raise StatsFormatError(f"stats body does not match the format: {exc}") from exc
