"""Page-cache hit/miss counting on real files: pages are dropped from the cache with
``posix_fadvise(DONTNEED)``, then read back.

DONTNEED is advice, and any read — even the RWF_NOWAIT probe of
:meth:`PageCacheReads.probe` — may start readahead that brings pages back while the
test runs. :func:`evict` (conftest.py, shared with the store metrics test) drops
the pages after the probe, checks with ``mincore`` that they are gone (asking again
while they are not), and fails saying so if the kernel never lets go.

Even then the kernel does not always answer as the scenario intends. A cold read
can be served by I/O that finished before the read looked at the page again (a
virtual disk whose host has the file cached answers that fast): a hit. And a
cache-only read refuses a cached page that carries the readahead mark, because it
may start no I/O: a miss. Both times the counter tells what the kernel did. Seen in
fresh-clone runs of `make test`, a few times a day. :func:`cold_pass` therefore
runs a whole scenario again, evicted afresh, until its counts are the ones it
intends; a counter that counts wrong never gets there and still fails."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketcluster.broker.store import GetResult, MessageStore
from rocketcluster.broker.store.page_cache import SMALL_READ, PageCacheReads

from .conftest import COLD_ATTEMPTS, NO_NOWAIT, PAGE, evict, message, small_config


@pytest.fixture
def cold_file(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """An fd on 64 KiB of known bytes, synced and dropped from the page cache."""
    data = os.urandom(16 * PAGE)
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        evict(fd)
        yield fd, data
    finally:
        os.close(fd)


def measuring(fd: int, cold_from: int | None = None) -> PageCacheReads:
    """Counts for ``fd``; then [cold_from, end) is dropped from the cache again (the
    probe's read may have started readahead)."""
    reads = PageCacheReads()
    reads.probe(fd)
    if not reads.supported:
        pytest.fail(NO_NOWAIT)
    if cold_from is not None:
        evict(fd, cold_from)
    return reads


def cold_pass(
    scenario: Callable[[], PageCacheReads], intended: Callable[[PageCacheReads], bool]
) -> PageCacheReads:
    """The counts of the first run of ``scenario`` (which evicts what it reads cold)
    that are as ``intended``; the last run's counts when none were, for the test's
    assertion to show."""
    reads = scenario()
    for attempt in range(1, COLD_ATTEMPTS):
        if intended(reads):
            break
        time.sleep(0.1 * attempt)  # a burst of load passes (4.5 s at most in all)
        reads = scenario()
    return reads


def test_a_cold_read_is_a_miss_and_the_same_read_again_a_hit(
    cold_file: tuple[int, bytes],
) -> None:
    fd, data = cold_file
    wanted = data[5 * PAGE + 7 : 5 * PAGE + 107]

    counts: list[tuple[int, int]] = []

    def scenario() -> PageCacheReads:
        reads = measuring(fd, cold_from=0)
        assert reads.read(fd, 100, 5 * PAGE + 7) == wanted
        counts.append((reads.hits, reads.misses))
        assert reads.read(fd, 100, 5 * PAGE + 7) == wanted
        return reads

    reads = cold_pass(scenario, lambda r: (r.hits, r.misses) == (1, 1))
    assert counts[-1] == (0, 1)  # cold: a miss
    assert (reads.hits, reads.misses) == (1, 1)  # then cached: a hit


def test_a_partly_cached_range_is_a_miss_and_reads_whole(cold_file: tuple[int, bytes]) -> None:
    fd, data = cold_file

    def scenario() -> PageCacheReads:
        reads = measuring(fd, cold_from=0)
        os.pread(fd, PAGE, 0)  # page 0 cached
        evict(fd, PAGE)  # whatever readahead took: gone
        assert reads.read(fd, 3 * PAGE, 0) == data[: 3 * PAGE]
        return reads

    reads = cold_pass(scenario, lambda r: r.misses == 1)
    assert (reads.hits, reads.misses) == (0, 1)


def test_large_reads_share_a_buffer_but_return_their_own_bytes(tmp_path: Path) -> None:
    data = os.urandom(1 << 20)
    fd = os.open(tmp_path / "big", os.O_RDWR | os.O_CREAT, 0o644)
    size = SMALL_READ + 3 * PAGE + 5
    try:
        os.write(fd, data)

        def scenario() -> PageCacheReads:
            reads = measuring(fd, cold_from=0)
            first = reads.read(fd, size, 0)  # cold: a miss
            evict(fd, 3 * size)  # cold again, whatever the first read's readahead took
            second = reads.read(fd, size, 3 * size)  # reuses the buffer first was read into
            assert first == data[:size]
            assert second == data[3 * size : 4 * size]
            counts.append((reads.hits, reads.misses))
            assert reads.read(fd, size, 0) == data[:size]  # cached now: a hit
            return reads

        counts: list[tuple[int, int]] = []
        reads = cold_pass(scenario, lambda r: (r.hits, r.misses) == (1, 2))
        assert counts[-1] == (0, 2)
        assert (reads.hits, reads.misses) == (1, 2)
    finally:
        os.close(fd)


def test_reading_at_the_end_of_the_file_counts_nothing(cold_file: tuple[int, bytes]) -> None:
    fd, data = cold_file
    reads = measuring(fd)
    assert reads.read(fd, 10, len(data)) == b""
    assert (reads.hits, reads.misses) == (0, 0)


def test_a_filesystem_that_cannot_tell_counts_nothing() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.fail("this test needs a writable /dev/shm (tmpfs), as every Linux has")
    path = shm / f"page-cache-test-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"abcdef" * 1000)
        unprobed = PageCacheReads()
        if not unprobed.supported:
            pytest.fail("this kernel has no RWF_NOWAIT (preadv2, Linux 4.14+) at all")
        first = unprobed.read(fd, 6, 6)
        if unprobed.supported:
            pytest.fail(
                "/dev/shm answers RWF_NOWAIT reads on this kernel: this test needs a "
                "filesystem that cannot (tmpfs could not before Linux 6.x); point it at one"
            )
        assert first == b"abcdef"  # the read itself still works
        assert unprobed.read(fd, 3, 0) == b"abc"
        assert (unprobed.hits, unprobed.misses) == (0, 0)
        probed = PageCacheReads()
        probed.probe(fd)
        assert not probed.supported
    finally:
        os.close(fd)
        path.unlink()


async def test_consumer_reads_count_and_scrape_reads_do_not(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        reads = store.commitlog.page_cache
        if not reads.supported:
            pytest.fail(NO_NOWAIT)
        for i in range(60):
            assert (await store.put(message(i, queues=1, size=300))).ok
        await store.flush()
        # The first record's cold read starts the I/O (and readahead) of the rest: a
        # cold pass that met the disk at all has a miss; the warm pass after it none.
        passes: list[tuple[GetResult, GetResult, int]] = []

        def scenario() -> PageCacheReads:
            for seg in store.commitlog.segments:
                evict(seg.fd)
            reads.hits = reads.misses = 0
            cold = store.get_messages("orders", 0, 0, 32)
            cold_misses = reads.misses
            passes.append((cold, store.get_messages("orders", 0, 0, 32), cold_misses))
            return reads

        cold_pass(scenario, lambda r: passes[-1][2] >= 1 and r.misses == passes[-1][2])
        got, again, misses = passes[-1]
        assert [m.queue_offset for m in got.messages] == list(range(32))
        assert misses >= 1  # at least the first record came from the disk
        assert [m.body for m in again.messages] == [m.body for m in got.messages]
        assert (reads.hits, reads.misses) == (64 - misses, misses)  # one count per read
        first = got.messages[0]
        store.read_message(first.physical_offset, first.size, count_cache=False)
        assert (reads.hits, reads.misses) == (64 - misses, misses)
        store.read_message(first.physical_offset, first.size)  # a client's read counts
        assert (reads.hits, reads.misses) == (65 - misses, misses)
    finally:
        await store.close()
