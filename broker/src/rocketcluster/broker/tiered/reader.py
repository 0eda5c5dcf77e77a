"""Cold reads: messages served from the tier's segments, through the read-ahead cache.

A read names a queue offset; the segment holding it is fetched whole (one request),
decoded with every record's CRC checked, kept in the cache, and the messages from the
offset on are returned. Fetching segment *n* also starts fetching segment *n+1* in the
background when the cache has room: a consumer working through cold data finds the
next segment waiting. Backend calls run on worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketcluster.broker.store.record import StoredMessage
from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.cache import CacheKey, SegmentCache
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.segment import SegmentHeader, decode_segment

log = logging.getLogger(__name__)


@dataclass
class ReadCounters:
    reads: int = 0  # reads served from the tier (cache or backend)
    messages: int = 0
    fetches: int = 0  # segments fetched from the backend
    fetched_bytes: int = 0
    fallbacks: int = 0  # tier reads that failed and were served locally instead
    errors: int = 0  # failed fetches
    last_error: str = ""


class TierReader:
    def __init__(
        self,
        catalog: TierCatalog,
        backend: TierBackend,
        cache: SegmentCache,
        on_fetch: Callable[[float], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.backend = backend
        self.cache = cache
        self.counters = ReadCounters()
        self._on_fetch = on_fetch
        self._inflight: dict[CacheKey, asyncio.Future[list[StoredMessage]]] = {}
        self._prefetches: set[asyncio.Task[None]] = set()

    async def read(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[StoredMessage]:
        """Messages of one segment from ``offset`` (at most ``max_count``); empty when
        the tier does not hold ``offset``. Raises :class:`BackendError` or
        :class:`SegmentFormatError` when the segment cannot be read."""
        tier = self.catalog.get(topic, queue_id)
        header = tier.find(offset) if tier is not None else None
        if header is None:
            return []
        messages = await self._segment(header)
        self.counters.reads += 1
        picked = messages[offset - header.start : offset - header.start + max_count]
        self.counters.messages += len(picked)
        if tier is not None and offset - header.start + max_count >= header.count // 2:
            following = tier.find(header.end)
            if following is not None:
                self._prefetch(following)
        return picked

    async def read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        found = await self.read(topic, queue_id, offset, 1)
        return found[0] if found else None

    async def segment(self, header: SegmentHeader) -> list[StoredMessage]:
        """Every message of a segment (for lookups by time, key or id)."""
        return await self._segment(header)

    async def _segment(self, header: SegmentHeader) -> list[StoredMessage]:
        key = (header.topic, header.queue_id, header.start)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        running = self._inflight.get(key)
        if running is not None:  # one fetch per segment however many readers wait
            return await asyncio.shield(running)
        future: asyncio.Future[list[StoredMessage]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            messages = await self._fetch(header)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a fetch nobody else awaited is not "lost"
            raise
        else:
            future.set_result(messages)
            return messages
        finally:
            self._inflight.pop(key, None)

    async def _fetch(self, header: SegmentHeader) -> list[StoredMessage]:
        name = self.catalog.name_of(header)
        started = time.monotonic()
        try:
            data = await asyncio.to_thread(self.backend.get, name)
            got, messages = decode_segment(data)
        except Exception as exc:
            self.counters.errors += 1
            self.counters.last_error = f"{name}: {type(exc).__name__}: {exc}"
            raise
        if (got.start, got.end) != (header.start, header.end):
            self.counters.errors += 1
            raise ValueError(f"{name} covers [{got.start}, {got.end}), not the catalogued range")
        seconds = time.monotonic() - started
        self.counters.fetches += 1
        self.counters.fetched_bytes += len(data)
        if self._on_fetch is not None:
            self._on_fetch(seconds)
        self.cache.put((header.topic, header.queue_id, header.start), len(data), messages)
        return messages

    def _prefetch(self, header: SegmentHeader) -> None:
        key = (header.topic, header.queue_id, header.start)
        if (
            key in self.cache
            or key in self._inflight
            or not self.cache.room_for(header.records_bytes)
        ):
            return

        async def fetch() -> None:
            try:
                await self._segment(header)
            except Exception as exc:  # a read that needs it will try again and report
                log.debug("prefetch of %s failed: %r", key, exc)

        task = asyncio.get_running_loop().create_task(fetch(), name=f"tier-prefetch-{key}")
        self._prefetches.add(task)
        task.add_done_callback(self._prefetches.discard)

    async def close(self) -> None:
        for task in list(self._prefetches):
            task.cancel()
        await asyncio.gather(*self._prefetches, return_exceptions=True)
