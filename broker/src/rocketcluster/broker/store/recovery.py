"""Commit-log recovery: find the last complete, CRC-valid record and cut there.

What does not fit is moved to ``quarantine/`` with a note of why and listed in the
RecoveryReport; nothing is deleted unless it holds only zeros. Consume queues and the
index are repaired afterwards by the store from ``RecoveryReport.redo_from``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from rocketcluster.broker.store import record
from rocketcluster.broker.store.checkpoint import StoreCheckpoint
from rocketcluster.broker.store.commitlog import CommitLog, Segment
from rocketcluster.broker.store.files import is_all_zero, parse_offset_name, quarantine

log = logging.getLogger(__name__)

SCAN_WINDOW = 8 << 20


@dataclass(slots=True)
class QuarantinedFile:
    original: str
    moved_to: str
    reason: str


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found and did; logged at start and served by the admin API."""

    checkpoint_found: bool = False
    clean_shutdown: bool = False
    scanned_from: int = 0
    min_offset: int = 0
    end_offset: int = 0
    stop_reason: str = ""
    bytes_discarded: int = 0
    redo_from: int = 0
    records_redispatched: int = 0
    index_rebuilt: bool = False
    quarantined: list[QuarantinedFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def quarantine(self, path: Path, quarantine_dir: Path, reason: str) -> None:
        moved = quarantine(path, quarantine_dir, reason)
        self.quarantined.append(QuarantinedFile(str(path), str(moved), reason))
        log.error("quarantined %s: %s (moved to %s)", path, reason, moved)


def detect_segment_size(
    directory: Path, configured: int, checkpoint: StoreCheckpoint | None, report: RecoveryReport
) -> int:
    """The segment size the existing files were written with (it cannot change)."""
    existing = checkpoint.segment_size if checkpoint else None
    if existing is None and directory.exists():
        sizes = sorted(
            p.stat().st_size
            for p in directory.iterdir()
            if p.is_file() and parse_offset_name(p.name) is not None
        )
        existing = sizes[-1] if sizes else None
    if existing and existing != configured:
        report.warnings.append(
            f"segment_size {configured} ignored: the commit log was written with {existing}"
        )
        return existing
    return configured


def open_segments(
    directory: Path, segment_size: int, quarantine_dir: Path, report: RecoveryReport
) -> list[Segment]:
    """Open the segment files that form one contiguous run; quarantine the others."""
    directory.mkdir(parents=True, exist_ok=True)
    candidates: list[tuple[int, Path]] = []
    for path in sorted(directory.iterdir()):
        base = parse_offset_name(path.name)
        if path.name.endswith(".tmp") or base is None or not path.is_file():
            report.quarantine(path, quarantine_dir, "not a commit log segment name")
            continue
        if base % segment_size:
            report.quarantine(
                path, quarantine_dir, f"start {base} not a multiple of {segment_size}"
            )
            continue
        candidates.append((base, path))
    candidates.sort()
    segments: list[Segment] = []
    for base, path in candidates:
        size = path.stat().st_size
        if segments and base != segments[-1].end:
            report.quarantine(path, quarantine_dir, f"gap: expected start {segments[-1].end}")
            continue
        if size > segment_size:
            report.quarantine(path, quarantine_dir, f"size {size}, expected {segment_size}")
            continue
        fd = os.open(path, os.O_RDWR)
        if size < segment_size:
            # A short file (its tail never reached the disk): the missing part reads as
            # zeros, so the scan ends the log inside it and later files are cut off.
            os.ftruncate(fd, segment_size)
            report.warnings.append(f"{path.name} was {size} bytes; extended to {segment_size}")
        segments.append(Segment(path, base, segment_size, fd))
    return segments


def find_end(segments: list[Segment], start: int) -> tuple[int, str]:
    """Scan from ``start`` (a record boundary) and return the end of the last valid
    record and why the scan stopped."""
    if not segments:
        return start, "empty commit log"
    pos = start
    for seg in segments:
        if seg.end <= pos:
            continue
        while pos < seg.end:
            length = min(SCAN_WINDOW, seg.end - pos)
            view = memoryview(seg.pread(pos, length))
            i = 0
            while i < len(view):
                check = record.check_record(view, i, pos + i, seg.end - pos - i)
                if check.kind == record.RecordKind.BLANK:
                    i = seg.end - pos
                    break
                if check.kind is None:
                    window_cut = check.reason in ("truncated header", "truncated record")
                    if window_cut and i > 0 and pos + len(view) < seg.end:
                        break  # the record continues in the next window
                    return pos + i, check.reason
                i += check.size
            pos += i
    return pos, "end of the last segment"


def scan_start(
    segments: list[Segment], checkpoint: StoreCheckpoint | None, report: RecoveryReport
) -> int:
    """Where the scan starts: the checkpoint, if it points inside the log."""
    first = segments[0].base if segments else 0
    if checkpoint is None:
        return first
    start = min(checkpoint.commitlog_flushed, checkpoint.logics_flushed)
    last_end = segments[-1].end if segments else first
    if start < first:
        return first
    if start > last_end:
        report.warnings.append(
            f"checkpoint offset {start} beyond the last segment end {last_end}; scanning it all"
        )
        return first
    return start


def _check_segment_heads(segments: list[Segment], start: int, report: RecoveryReport) -> int:
    """A cheap check of the segments before the scan start: each must begin with a
    valid record. The first that does not becomes the scan start (and so the cut)."""
    for seg in segments:
        if seg.base >= start:
            break
        head = seg.pread(seg.base, record.END_FILE_MIN_BLANK_LENGTH)
        total = int.from_bytes(head[:4], "big")
        data = seg.pread(seg.base, min(max(total, record.HEADER_SIZE), seg.size))
        check = record.check_record(data, 0, seg.base, seg.size)
        if check.kind is None:
            report.warnings.append(
                f"segment {seg.path.name} starts with an invalid record ({check.reason}) "
                "below the checkpoint: the disk lost or corrupted fsynced data; the log is "
                "cut there and the rest kept in quarantine"
            )
            return seg.base
    return start


def recover_commitlog(
    commitlog: CommitLog,
    segments: list[Segment],
    checkpoint: StoreCheckpoint | None,
    quarantine_dir: Path,
    report: RecoveryReport,
) -> None:
    """Cut the log at its last valid record and attach the segments to ``commitlog``."""
    start = scan_start(segments, checkpoint, report)
    start = _check_segment_heads(segments, start, report)
    end, reason = find_end(segments, start)
    holder = next((seg for seg in segments if seg.base <= start < seg.end), None)
    if end == start and reason != "end of data" and holder is not None and start > holder.base:
        # The checkpoint may point at bytes that are no longer a record (a stale or
        # copied checkpoint): rescan its segment from the start before cutting.
        start = holder.base
        end, reason = find_end(segments, start)
    report.scanned_from = start
    report.stop_reason = reason
    durable = checkpoint.commitlog_flushed if checkpoint else 0
    if end < durable:
        report.warnings.append(
            f"records below the checkpointed durable offset {durable} failed their checks "
            f"at {end} ({reason}): the disk lost fsynced data"
        )
    commitlog.attach(segments, segments[-1].end if segments else start)
    if not segments:
        commitlog.set_empty_start(start - start % commitlog.segment_size)
        report.end_offset = report.min_offset = commitlog.write_offset
        return
    clean = checkpoint is not None and checkpoint.clean_shutdown
    if not (clean and end == checkpoint.commitlog_flushed):  # type: ignore[union-attr]
        _keep_discarded_tail(segments, end, quarantine_dir, report)
    dropped = commitlog.truncate(end) if end < commitlog.write_offset else []
    for seg in dropped:
        if is_all_zero(seg.path):
            seg.path.unlink(missing_ok=True)
        else:
            report.quarantine(seg.path, quarantine_dir, f"data after the end of the log at {end}")
    report.end_offset = commitlog.write_offset
    report.min_offset = commitlog.min_offset


def _keep_discarded_tail(
    segments: list[Segment], end: int, quarantine_dir: Path, report: RecoveryReport
) -> None:
    """Copy the non-zero bytes after ``end`` in its segment aside before they are zeroed."""
    holder = next((s for s in segments if s.base <= end < s.end), None)
    if holder is None:
        return
    rel = end - holder.base
    data = holder.pread(end, holder.size - rel)
    last = len(data.rstrip(b"\x00"))
    if last == 0:
        return
    report.bytes_discarded += last
    quarantine_dir.mkdir(parents=True, exist_ok=True)
    tail = quarantine_dir / f"commitlog-{holder.path.name}-tail-at-{end}"
    tail.write_bytes(data[:last])
    report.quarantined.append(
        QuarantinedFile(str(holder.path), str(tail), f"{last} bytes after the last valid record")
    )
    log.warning("commit log cut at %d: %d bytes after it kept in %s", end, last, tail)
