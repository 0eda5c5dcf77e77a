"""Reading the stats topic back (the admin API's ``/v1/stats/...``).

Readers page through queue 0 of the stats topic by queue offset and find where a time
window starts by a binary search over store times, so a Spark job reads only the
snapshots it asked for. Only dispatched (on a replicated group: confirmed) messages
are read, as for any consumer. A body that is not a snapshot this broker can read (a
client wrote into the topic, a newer format) is skipped and counted, never fails the
page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from rocketcluster.api.stats import ROW_KINDS, STATS_TOPIC, StatsFormatError, decode_snapshot
from rocketcluster.broker.stats.publisher import STATS_QUEUE
from rocketcluster.broker.store import MessageStore, StoreError

MAX_PAGE_MESSAGES: Final = 1000
# A page stops after this many body bytes (at least one message): a page of the
# largest snapshots stays a few MiB of JSON.
MAX_PAGE_BYTES: Final = 4 << 20


@dataclass(slots=True)
class SnapshotPage:
    min_offset: int
    max_offset: int
    next_offset: int
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "nextOffset": self.next_offset,
            "snapshots": self.snapshots,
            "skipped": self.skipped,
        }


def read_page(
    store: MessageStore,
    from_offset: int,
    limit: int,
    max_bytes: int = MAX_PAGE_BYTES,
    rows: frozenset[str] = frozenset(ROW_KINDS),
) -> SnapshotPage:
    """Snapshots from queue offset ``from_offset`` (from the oldest kept when it was
    deleted), at most ``limit`` messages; ``next_offset`` is where the next page
    starts (``from_offset`` itself when nothing is there yet)."""
    if from_offset < 0 or not 1 <= limit <= MAX_PAGE_MESSAGES:
        raise ValueError(
            f"fromOffset must be >= 0 and limit in 1..{MAX_PAGE_MESSAGES} "
            f"(got {from_offset}, {limit})"
        )
    cq = store.queues.get(STATS_TOPIC, STATS_QUEUE)
    if cq is None:
        return SnapshotPage(0, 0, from_offset)
    lo, hi = cq.min_index, cq.max_index
    offset = max(from_offset, lo)
    page = SnapshotPage(lo, hi, offset)
    clog_min = store.commitlog.min_offset
    used = 0
    while offset < hi and used < max_bytes:
        room = limit - len(page.snapshots) - page.skipped
        entries = cq.entries(offset, min(64, hi - offset, room)) if room > 0 else []
        if not entries:
            break
        for entry in entries:
            if used >= max_bytes:
                break
            offset += 1
            if entry.physical_offset < clog_min:
                page.skipped += 1  # retention removed it while we read
                continue
            try:
                msg = store.read_message(entry.physical_offset, entry.size, count_cache=False)
                snapshot = decode_snapshot(msg.body)
            except (StatsFormatError, StoreError):
                page.skipped += 1
                continue
            used += len(msg.body)
            page.snapshots.append(
                {
                    "offset": offset - 1,
                    "storeTime": msg.store_timestamp,
                    "snapshot": snapshot.model_dump(
                        by_alias=True, exclude=set(ROW_KINDS) - rows or None
                    ),
                }
            )
        page.next_offset = offset
    return page


def offset_for_time(store: MessageStore, time_ms: int) -> tuple[int, int, int]:
    """(the first queue offset of the stats topic stored at or after ``time_ms``, the
    queue's min offset, its max offset); max offset when every message is older."""
    cq = store.queues.get(STATS_TOPIC, STATS_QUEUE)
    if cq is None:
        return 0, 0, 0
    return store.offset_at_time(STATS_TOPIC, STATS_QUEUE, time_ms), cq.min_index, cq.max_index
