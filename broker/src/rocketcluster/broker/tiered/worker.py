"""Writing a group of segments: read their records from the commit log's files, encode
them, write each create-only. This is the part of uploading that costs CPU per
message, so a broker runs it in a process of its own: there it has the second core
and never holds the GIL the client-facing loop needs. Measured through a broker, the
same work on a thread took 12-18% of produce throughput (DESIGN §9: per-message
Python work off the hot path). Tests and tools run the same function on a thread.

Everything a job needs travels with it (it is pickled): which commit-log files hold
the records, where each record is, the backend's settings. The commit log's files
are only read. Retention never deletes what the tier does not hold yet, and only a
master uploads, so nothing truncates them meanwhile. A record that is not the one
expected (a bug, or a race nobody foresaw) fails :func:`encode_segment`'s checks, and
nothing is written.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rocketcluster.api.tiered_spec import TieredStorageSpec
from rocketcluster.broker.tiered.backend import ObjectExists, TierBackend
from rocketcluster.broker.tiered.catalog import read_header
from rocketcluster.broker.tiered.factory import backend_from_spec
from rocketcluster.broker.tiered.policy import coalesce
from rocketcluster.broker.tiered.segment import SegmentHeader, encode_segment

# Records closer than MAX_GAP share one read, up to MAX_RUN bytes; when a group's
# records fill at least half of the range they span (queues written side by side),
# the whole range is one read.
MAX_GAP = 64 << 10
MAX_RUN = 16 << 20
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SegmentJob:
    name: str
    topic: str
    queue_id: int
    begin: int
    offsets: bytes  # array("Q") of the records' commit-log offsets
    sizes: bytes  # array("I") of their sizes

    @classmethod
    def of(
        cls, name: str, topic: str, queue_id: int, begin: int, offsets: list[int], sizes: list[int]
    ) -> SegmentJob:
        return cls(
            name, topic, queue_id, begin, array("Q", offsets).tobytes(), array("I", sizes).tobytes()
        )


@dataclass(frozen=True)
class UploadJob:
    spec: str  # the TieredStorageSpec, as JSON (the backend is made from it)
    files: tuple[tuple[int, str], ...]  # (base offset, path) of the commit-log files
    writer: str
    segments: tuple[SegmentJob, ...]


@dataclass(frozen=True)
class Written:
    header: SegmentHeader
    size: int
    adopted: bool  # the name was taken: what is there (an earlier try's, another master's)


def run_upload(job: UploadJob, backend: TierBackend | None = None) -> list[Written]:
    """Write every segment of ``job`` in order; raises the first backend error (what
    was written before it is found again and adopted on the next try)."""
    target = backend if backend is not None else _backend(job.spec)
    spans = [(list(array("Q", s.offsets)), list(array("I", s.sizes))) for s in job.segments]
    with _CommitLogFiles(job.files) as files:
        records = _read(files, spans)
    out = []
    for segment, chunk in zip(job.segments, records, strict=True):
        header, data = encode_segment(segment.topic, segment.queue_id, chunk, job.writer)
        try:
            target.put_new(segment.name, data)
        except ObjectExists:
            found = read_header(target, segment.name)
            sizes = [o.size for o in target.list(segment.name) if o.name == segment.name]
            out.append(Written(found, sizes[0] if sizes else 0, True))
            continue
        out.append(Written(header, len(data), False))
    return out


def _read(
    files: _CommitLogFiles, spans: Sequence[tuple[list[int], list[int]]]
) -> list[list[memoryview]]:
    """Each segment's records, read in shared runs: queues written side by side are
    read once for all of them, not once each."""
    start = min(offsets[0] for offsets, _ in spans)
    end = max(offsets[-1] + sizes[-1] for offsets, sizes in spans)
    if end - start <= 2 * sum(sum(sizes) for _, sizes in spans):
        whole = memoryview(bytearray(end - start))
        files.read_into(start, whole)
        return [
            [whole[p - start : p - start + n] for p, n in zip(offsets, sizes, strict=True)]
            for offsets, sizes in spans
        ]
    owner = {p: i for i, (offsets, _) in enumerate(spans) for p in offsets}
    merged = sorted(pair for offsets, sizes in spans for pair in zip(offsets, sizes, strict=True))
    out: list[list[memoryview]] = [[] for _ in spans]
    for run_start, run_end, members in coalesce(merged, MAX_GAP, MAX_RUN):
        run = memoryview(bytearray(run_end - run_start))
        files.read_into(run_start, run)
        for phys, size in members:
            out[owner[phys]].append(run[phys - run_start : phys - run_start + size])
    return out


class _CommitLogFiles:
    """Commit-log files opened read-only by path, for the duration of one job."""

    def __init__(self, files: Sequence[tuple[int, str]]) -> None:
        self._files = sorted(files)
        self._fds: dict[int, int] = {}

    def __enter__(self) -> _CommitLogFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)

    def read_into(self, offset: int, buffer: memoryview) -> None:
        done = 0
        for base, end, fd in self._covering(offset, offset + len(buffer)):
            position = offset + done
            part = buffer[done : done + min(len(buffer) - done, end - position)]
            got = os.preadv(fd, (part,), position - base)
            if got != len(part):
                raise OSError(f"commit-log file at {base} ended early at {position + got}")
            done += got
        if done != len(buffer):
            raise OSError(f"the commit log does not hold [{offset}, {offset + len(buffer)})")

    def _covering(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(base, end, fd) of each file overlapping [start, stop), in order."""
        bases = [b for b, _ in self._files]
        for i, (base, path) in enumerate(self._files):
            end = bases[i + 1] if i + 1 < len(bases) else stop
            if end <= start or base >= stop:
                continue
            fd = self._fds.get(base)
            if fd is None:
                fd = self._fds[base] = os.open(path, os.O_RDONLY)
            yield base, end, fd


@functools.lru_cache(maxsize=4)
def _backend(spec: str) -> TierBackend:
    """The backend of a spec, made once per worker process (a pure memo)."""
    return backend_from_spec(TieredStorageSpec.model_validate_json(spec))


def init_worker(parent: int) -> None:
    """A worker process dies with the broker that started it (Linux), even when that
    broker is SIGKILLed: nothing of a broker outlives it. A broker killed while the
    worker was still starting is caught too (its parent is then another process)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker decides when it stops
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def warm_up(spec: str) -> None:
    """Submitted at start: the pool starts a process then, and it makes its backend
    (boto3 costs a second of CPU the first time), not at the first upload."""
    _backend(spec)
