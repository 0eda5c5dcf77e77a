"""The tier's catalogue: which segments each topic/queue has in the backend.

The backend is the truth. An object's name says where its run of messages starts
(``<cluster>/<group>/segments/<topic>/<queue>/<start>.seg``), and a segment is only
ever written create-only, so for every start offset there is at most one object.
A queue's *committed position* is the end of its last segment — what the backend
confirms, never what a writer hoped to write.

The broker keeps a copy of the headers in its metadata store (LMDB) so that a restart
does not read every object again; :meth:`TierCatalog.refresh` lists the backend and
reads the headers of objects it does not know (a new master after a failover finds
what the old one uploaded), and forgets the ones that are gone (remote retention, or
another master's). A queue whose objects do not join up — a hole — is reported, and
reads see the hole as removed data; uploads never create one.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from rocketcluster.api.names import path_component_problem
from rocketcluster.broker.tiered.backend import ObjectInfo, TierBackend
from rocketcluster.broker.tiered.segment import (
    HEADER_PROBE_BYTES,
    SegmentHeader,
    decode_header,
    header_length,
)

log = logging.getLogger(__name__)

SEGMENTS_DIR: Final = "segments"
SUFFIX: Final = ".seg"
_KV_PREFIX: Final = "tier/seg/"

QueueKey = tuple[str, int]


class ValueStore(Protocol):
    """The part of the broker's metadata store the catalogue keeps its copy in."""

    def put_values(self, values: dict[str, object]) -> None: ...
    def values_with_prefix(self, prefix: str) -> dict[str, object]: ...


def group_root(cluster: str, group: str) -> str:
    return f"{cluster}/{group}/{SEGMENTS_DIR}/"


def segment_name(root: str, topic: str, queue_id: int, start: int) -> str:
    """The object name of a segment; ValueError for a topic that is not one safe
    name part (the store validates topics; this is the last line of defence)."""
    problem = path_component_problem(topic)
    if problem:
        raise ValueError(f"topic {topic!r} cannot name a tier object: {problem}")
    return f"{root}{topic}/{queue_id}/{start:020d}{SUFFIX}"


def parse_segment_name(root: str, name: str) -> tuple[str, int, int] | None:
    """(topic, queue id, start offset) of an object name under ``root``, or None for
    anything else (a stray file is ignored, never trusted)."""
    if not name.startswith(root) or not name.endswith(SUFFIX):
        return None
    parts = name[len(root) : -len(SUFFIX)].split("/")
    if len(parts) != 3 or not parts[0]:
        return None
    topic, qid, start = parts
    if not (qid.isdigit() and start.isdigit() and len(start) == 20):
        return None
    return topic, int(qid), int(start)


@dataclass
class QueueTier:
    """One topic/queue's segments in the tier, ordered by start offset."""

    topic: str
    queue_id: int
    segments: list[SegmentHeader] = field(default_factory=list)
    sizes: dict[int, int] = field(default_factory=dict)  # start -> object bytes

    @property
    def start(self) -> int | None:
        return self.segments[0].start if self.segments else None

    @property
    def end(self) -> int | None:
        """The committed position: where the next segment must start."""
        return self.segments[-1].end if self.segments else None

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def add(self, header: SegmentHeader, size: int) -> None:
        i = bisect.bisect_left(self.segments, header.start, key=_start)
        if i < len(self.segments) and self.segments[i].start == header.start:
            self.segments[i] = header
        else:
            self.segments.insert(i, header)
        self.sizes[header.start] = size

    def remove_through(self, start: int) -> list[SegmentHeader]:
        """Drop every segment starting at or before ``start`` (head first)."""
        gone = [s for s in self.segments if s.start <= start]
        self.segments = [s for s in self.segments if s.start > start]
        for s in gone:
            self.sizes.pop(s.start, None)
        return gone

    def find(self, offset: int) -> SegmentHeader | None:
        """The segment holding queue offset ``offset``, if the tier has it."""
        i = bisect.bisect_right(self.segments, offset, key=_start) - 1
        if i >= 0 and offset < self.segments[i].end:
            return self.segments[i]
        return None

    def first_at_or_after(self, offset: int) -> SegmentHeader | None:
        """The segment holding ``offset``, or the next one after a hole."""
        found = self.find(offset)
        if found is not None:
            return found
        i = bisect.bisect_right(self.segments, offset, key=_start)
        return self.segments[i] if i < len(self.segments) else None

    def holes(self) -> list[tuple[int, int]]:
        return [(a.end, b.start) for a, b in itertools.pairwise(self.segments) if a.end < b.start]


def _start(header: SegmentHeader) -> int:
    return header.start


def read_header(backend: TierBackend, name: str) -> SegmentHeader:
    """An object's header, read from the backend (one or two ranged reads)."""
    head = backend.get(name, 0, HEADER_PROBE_BYTES)
    need = header_length(head)
    if need > len(head):
        head = backend.get(name, 0, need)
    return decode_header(head)


class TierCatalog:
    def __init__(self, backend: TierBackend, cluster: str, group: str, values: ValueStore) -> None:
        self.backend = backend
        self.root = group_root(cluster, group)
        self._values = values
        self._queues: dict[QueueKey, QueueTier] = {}
        self._unsaved: list[tuple[SegmentHeader, int]] = []
        self._load()

    # -- the local copy ----------------------------------------------------------

    def _load(self) -> None:
        for key, value in self._values.values_with_prefix(self._kv_prefix).items():
            if not isinstance(value, dict):
                continue
            try:
                header = SegmentHeader.from_json(value["header"])
                size = int(value["size"])
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring a damaged tier catalogue entry %s", key)
                continue
            self.queue(header.topic, header.queue_id).add(header, size)

    @property
    def _kv_prefix(self) -> str:
        """Where this catalogue's copy lives in the metadata store: per cluster and
        group (``root``), so another tier on the same store never loads it."""
        return f"{_KV_PREFIX}{self.root}"

    def _kv_key(self, header: SegmentHeader) -> str:
        return f"{self._kv_prefix}{header.topic}/{header.queue_id}/{header.start:020d}"

    def _save(self, added: list[tuple[SegmentHeader, int]], removed: list[SegmentHeader]) -> None:
        values: dict[str, object] = {self._kv_key(h): None for h in removed}
        values.update({self._kv_key(h): {"header": h.to_json(), "size": n} for h, n in added})
        self._values.put_values(values)

    # -- reading it -------------------------------------------------------------

    def queue(self, topic: str, queue_id: int) -> QueueTier:
        key = (topic, queue_id)
        tier = self._queues.get(key)
        if tier is None:
            tier = self._queues[key] = QueueTier(topic, queue_id)
        return tier

    def get(self, topic: str, queue_id: int) -> QueueTier | None:
        return self._queues.get((topic, queue_id))

    def __iter__(self) -> Iterator[QueueTier]:
        return iter(list(self._queues.values()))

    def name_of(self, header: SegmentHeader) -> str:
        return self.name_for(header.topic, header.queue_id, header.start)

    def name_for(self, topic: str, queue_id: int, start: int) -> str:
        return segment_name(self.root, topic, queue_id, start)

    # -- changing it ------------------------------------------------------------

    def record(self, header: SegmentHeader, size: int) -> None:
        """A segment the backend confirmed (our write, or one we found there). The
        local copy is written by the next :meth:`save_pending` (one transaction for
        many segments, on a worker thread: the copy is only a cache of what the
        backend says, a crash before it costs one refresh)."""
        self.queue(header.topic, header.queue_id).add(header, size)
        self._unsaved.append((header, size))

    def save_pending(self) -> None:
        unsaved, self._unsaved = self._unsaved, []
        self._save(unsaved, [])

    def forget(self, topic: str, queue_id: int, through_start: int) -> list[SegmentHeader]:
        """Drop segments from the head of a queue up to the one at ``through_start``
        (remote retention deleted them)."""
        gone = self.queue(topic, queue_id).remove_through(through_start)
        self._save([], gone)
        return gone

    def refresh(self) -> RefreshResult:
        """Make the catalogue what the backend holds now. Blocking (list, then one
        ranged read per object not known yet)."""
        listed = self.backend.list(self.root)
        seen: dict[tuple[str, int, int], ObjectInfo] = {}
        for info in listed:
            parsed = parse_segment_name(self.root, info.name)
            if parsed is not None:
                seen[parsed] = info
        added: list[tuple[SegmentHeader, int]] = []
        removed: list[SegmentHeader] = []
        for tier in self._queues.values():
            gone = [h for h in tier.segments if (tier.topic, tier.queue_id, h.start) not in seen]
            if gone:
                starts = {h.start for h in gone}
                tier.segments = [h for h in tier.segments if h.start not in starts]
                for start in starts:
                    tier.sizes.pop(start, None)
                removed += gone
        damaged = []
        for (topic, qid, start), info in sorted(seen.items()):
            tier = self.queue(topic, qid)
            if start in tier.sizes:
                continue
            try:
                header = read_header(self.backend, info.name)
            except ValueError as exc:
                damaged.append(f"{info.name}: {exc}")
                continue
            if (header.topic, header.queue_id, header.start) != (topic, qid, start):
                damaged.append(f"{info.name}: its header says {header.topic}/{header.queue_id}")
                continue
            tier.add(header, info.size)
            added.append((header, info.size))
        self._save(added, removed)
        for problem in damaged:
            log.error("tier object not usable: %s", problem)
        return RefreshResult(len(seen), len(added), len(removed), damaged)


@dataclass(frozen=True)
class RefreshResult:
    objects: int
    added: int
    removed: int
    damaged: list[str]
