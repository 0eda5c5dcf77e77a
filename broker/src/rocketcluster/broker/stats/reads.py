"""ReadRecorder: when consumers were last served from each queue and commit-log segment.

The tiering report ranks data by read recency, which no store structure knows. The
receive path calls :meth:`ReadRecorder.served` once per delivered batch (never per
message, DESIGN §9) with the batch's first and last record; the segments holding those
two records count as read. A batch whose records span more segments (a long
redelivery gap) marks only its ends: a small undercount on a rare path, traded for a
hot path with two integer divisions. Times live in memory, since the broker started.
"""

from __future__ import annotations


class ReadRecorder:
    def __init__(self, segment_size: int) -> None:
        if segment_size <= 0:
            raise ValueError(f"segment_size must be positive, not {segment_size}")
        self.segment_size = segment_size
        self._queues: dict[tuple[str, int], int] = {}
        self._segments: dict[int, int] = {}

    def served(
        self, topic: str, queue_id: int, first_offset: int, last_offset: int, now_ms: int
    ) -> None:
        """A batch from ``topic``/``queue_id`` whose records start at the commit-log
        offsets ``first_offset`` and ``last_offset`` was handed to a consumer."""
        self._queues[(topic, queue_id)] = now_ms
        size = self.segment_size
        self._segments[first_offset - first_offset % size] = now_ms
        self._segments[last_offset - last_offset % size] = now_ms

    def queue(self, topic: str, queue_id: int) -> int | None:
        return self._queues.get((topic, queue_id))

    def segment(self, base: int) -> int | None:
        return self._segments.get(base)

    def forget_segments_below(self, offset: int) -> None:
        """Retention removed the segments below ``offset``."""
        for base in [b for b in self._segments if b < offset]:
            del self._segments[base]

    def forget_queues(self, keep: set[tuple[str, int]]) -> None:
        """Queues not in ``keep`` are gone (a deleted topic)."""
        for key in [k for k in self._queues if k not in keep]:
            del self._queues[key]
