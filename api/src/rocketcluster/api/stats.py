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
from collections.abc import Iterable
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rocketcluster.api.names import SYSTEM_TOPIC_PREFIX

STATS_TOPIC: Final = f"{SYSTEM_TOPIC_PREFIX}BROKER_STATS"
STATS_FORMAT_VERSION: Final = 1
MAX_ROWS_PER_MESSAGE: Final = 1000
DEFAULT_STATS_INTERVAL_SECONDS: Final = 30.0


class LagStatus(StrEnum):
    """A consumer queue's Burrow-style status, from best to worst: what the Spark lag
    job (``rocketcluster.jobs.lag``, whose docstring has the rules) and the console
    judge from these snapshots."""

    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    STALL = "STALL"
    STOP = "STOP"
    ERR = "ERR"


LAG_SEVERITY: Final = {s.value: i for i, s in enumerate(LagStatus)}


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


ROW_KINDS: Final = ("queues", "consumers", "segments")  # the order rows go in a body
_MAX_BODY_UNBOUNDED: Final = 1 << 62


class SnapshotTooLargeError(ValueError):
    """One row does not fit in a message: the broker's maxMessageBytes is too small."""


def row_json(row: BaseModel) -> bytes:
    """One row as it appears in a body (camelCase keys, compact)."""
    return row.model_dump_json(by_alias=True).encode()


def snapshot_head(snapshot: StatsSnapshot) -> dict[str, object]:
    """What every body of ``snapshot`` repeats: its version, time and broker."""
    return snapshot.model_dump(by_alias=True, exclude=set(ROW_KINDS))


def pack_bodies(
    head: dict[str, object],
    rows: Iterable[tuple[str, bytes]],
    *,
    max_rows: int = MAX_ROWS_PER_MESSAGE,
    max_body: int | None = None,
) -> list[bytes]:
    """The bodies of one snapshot from its rows already in JSON (``(kind, row_json)``,
    kinds in :data:`ROW_KINDS` order): each body ``head`` plus the next rows, at most
    ``max_rows`` of them and at most ``max_body`` bytes. Packed by size as it goes:
    nothing is encoded twice, however small the limit. At least one body (a broker
    with no queues still says it is there)."""
    limit = _MAX_BODY_UNBOUNDED if max_body is None else max_body
    prefix = json.dumps(head, separators=(",", ":")).encode()[:-1]  # without its "}"
    frame = len(prefix) + sum(len(f',"{k}":[]') for k in ROW_KINDS) + 1
    bodies: list[bytes] = []
    part: dict[str, list[bytes]] = {k: [] for k in ROW_KINDS}
    size, count = frame, 0

    def flush() -> None:
        lists = b"".join(b',"%s":[%s]' % (k.encode(), b",".join(part[k])) for k in ROW_KINDS)
        bodies.append(prefix + lists + b"}")

    for kind, data in rows:
        added = len(data) + (1 if part[kind] else 0)
        if count and (count == max_rows or size + added > limit):
            flush()
            part = {k: [] for k in ROW_KINDS}
            size, count, added = frame, 0, len(data)
        if size + added > limit:
            raise SnapshotTooLargeError(
                f"a stats snapshot row takes {frame + len(data)} bytes in a body, more than "
                f"maxMessageBytes {limit}: raise maxMessageBytes"
            )
        part[kind].append(data)
        size += added
        count += 1
    if count or not bodies:
        flush()
    return bodies


def encode_snapshot(snapshot: StatsSnapshot, max_body: int | None = None) -> list[bytes]:
    """The message bodies of one snapshot: rows split so that no body holds more than
    MAX_ROWS_PER_MESSAGE of them, nor more than ``max_body`` bytes (each body is a
    whole snapshot with a share of rows)."""
    rows = ((kind, row_json(row)) for kind in ROW_KINDS for row in getattr(snapshot, kind))
    return pack_bodies(snapshot_head(snapshot), rows, max_body=max_body)


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
