"""Open a store directory after any stop: commit log first, then what derives from it.

1. Read the checkpoint (a damaged one is quarantined: scan everything).
2. Open the segments, cut the commit log at its last valid record (``recovery``).
3. Open the consume queues, drop their entries from ``redo_from`` on and below the
   log's first offset; open the index (rebuilt from scratch if it cannot be opened).
4. Re-dispatch the records from ``redo_from`` to the end, so every record in the log
   has its consume-queue and index entries again.
5. If a consume queue disagrees with the commit log, it is quarantined and every
   queue is rebuilt from the start of the log: the commit log is the truth.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass

import lmdb

from rocketcluster.broker.store.checkpoint import StoreCheckpoint
from rocketcluster.broker.store.commitlog import CommitLog
from rocketcluster.broker.store.config import StoreConfig
from rocketcluster.broker.store.consumequeue import DATABASE_NAME, ConsumeQueueTable
from rocketcluster.broker.store.errors import StoreError
from rocketcluster.broker.store.index import IndexRequest, IndexService
from rocketcluster.broker.store.recovery import (
    RecoveryReport,
    detect_segment_size,
    open_segments,
    recover_commitlog,
)

log = logging.getLogger(__name__)

REDISPATCH_BATCH = 4096  # index entries handed to the index at once
FLUSH_EVERY = 65_536  # re-dispatched records between two consume-queue flushes
PROGRESS_EVERY_S = 5.0


@dataclass(slots=True)
class RecoveredStore:
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: IndexService
    report: RecoveryReport


class DerivedDataMismatch(StoreError):
    pass


def recover_store(cfg: StoreConfig) -> RecoveredStore:
    report = RecoveryReport()
    checkpoint = _load_checkpoint(cfg, report)
    segment_size = detect_segment_size(cfg.commitlog_dir, cfg.segment_size, checkpoint, report)
    segments = open_segments(cfg.commitlog_dir, segment_size, cfg.quarantine_dir, report)
    commitlog = CommitLog(cfg.commitlog_dir, segment_size)
    recover_commitlog(commitlog, segments, checkpoint, cfg.quarantine_dir, report)
    try:
        queues, index = _recover_derived(cfg, commitlog, checkpoint, report, full=False)
    except DerivedDataMismatch as exc:
        report.warnings.append(f"{exc}; rebuilding every consume queue from the commit log")
        log.error("%s; rebuilding consume queues", exc)
        report.quarantine(cfg.consumequeue_dir, cfg.quarantine_dir, str(exc))
        queues, index = _recover_derived(cfg, commitlog, checkpoint, report, full=True)
    for warning in report.warnings:
        log.warning("recovery: %s", warning)
    return RecoveredStore(commitlog, queues, index, report)


def _load_checkpoint(cfg: StoreConfig, report: RecoveryReport) -> StoreCheckpoint | None:
    try:
        checkpoint = StoreCheckpoint.load(cfg.checkpoint_path)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        report.quarantine(cfg.checkpoint_path, cfg.quarantine_dir, f"unreadable checkpoint: {exc}")
        return None
    report.checkpoint_found = checkpoint is not None
    report.clean_shutdown = bool(checkpoint and checkpoint.clean_shutdown)
    return checkpoint


def _open_index(cfg: StoreConfig, report: RecoveryReport) -> tuple[IndexService, bool]:
    """The index and whether it must be rebuilt from the start of the log."""
    fresh = not cfg.index_dir.exists()
    try:
        return IndexService(cfg.index_dir, cfg.index_map_size, cfg.index_entries_per_table), fresh
    except lmdb.Error as exc:
        report.quarantine(cfg.index_dir, cfg.quarantine_dir, f"index cannot be opened: {exc}")
        report.index_rebuilt = True
        return IndexService(cfg.index_dir, cfg.index_map_size, cfg.index_entries_per_table), True


def _recover_derived(
    cfg: StoreConfig,
    commitlog: CommitLog,
    checkpoint: StoreCheckpoint | None,
    report: RecoveryReport,
    *,
    full: bool,
) -> tuple[ConsumeQueueTable, IndexService]:
    queues = ConsumeQueueTable(cfg.consumequeue_dir, cfg.cq_block_entries)
    legacy = queues.legacy_directories()
    if legacy:
        # A store written before the consume-queue database: a preallocated file per
        # queue. Derived data: deleted (that frees their disk) and rebuilt from the log.
        report.warnings.append(
            f"consume queues in the old layout ({len(legacy)} topic directories, a file "
            "per queue): removed, rebuilt from the commit log"
        )
        for path in legacy:
            shutil.rmtree(path, ignore_errors=True)
    cq_missing = bool(legacy) or not (cfg.consumequeue_dir / DATABASE_NAME).exists()
    edges = queues.load()
    start, end = commitlog.min_offset, commitlog.write_offset
    if full or checkpoint is None or cq_missing:
        redo_from = start
    else:
        redo_from = max(start, min(checkpoint.logics_flushed, end))
    # The edges read at load serve both: a cut queue keeps its first entry, or
    # holds nothing and is skipped by the retention.
    queues.truncate_from_physical(redo_from, edges)
    queues.delete_before_physical(start, edges)
    index, index_fresh = _open_index(cfg, report)
    index_from = start if index_fresh else redo_from
    report.index_rebuilt = report.index_rebuilt or (index_fresh and end > start)
    commitlog.queue_offsets = {(cq.topic, cq.queue_id): cq.max_index for cq in queues}
    try:
        report.records_redispatched = _redispatch(
            commitlog, queues, index, min(redo_from, index_from), redo_from
        )
    except BaseException:
        queues.close()
        index.close()
        raise
    report.redo_from = redo_from
    return queues, index


def _redispatch(
    commitlog: CommitLog,
    queues: ConsumeQueueTable,
    index: IndexService,
    scan_from: int,
    redo_from: int,
) -> int:
    """Rebuild consume-queue entries from ``redo_from`` and index entries from
    ``scan_from`` (the index may need more when it was lost)."""
    count = 0
    batch: list[IndexRequest] = []
    offsets = commitlog.queue_offsets
    total = commitlog.write_offset - redo_from
    said = time.monotonic()
    for msg in commitlog.iter_records(scan_from):
        if msg.physical_offset >= redo_from:
            if count % FLUSH_EVERY == 0 and count:
                queues.flush()  # memory stays bounded however long the log
                if time.monotonic() - said >= PROGRESS_EVERY_S:
                    said = time.monotonic()
                    done = msg.physical_offset - redo_from
                    log.info(
                        "recovery: %d records re-dispatched, %.0f%% of %.1f MB",
                        count,
                        100 * done / max(total, 1),
                        total / 1e6,
                    )
            cq = queues.get_or_create(msg.topic, msg.queue_id)
            try:
                cq.put(msg.queue_offset, msg.physical_offset, msg.size, msg.tags_code)
            except StoreError as exc:
                raise DerivedDataMismatch(
                    f"consume queue {msg.topic}/{msg.queue_id} disagrees with the commit log "
                    f"at queue offset {msg.queue_offset}: {exc}"
                ) from exc
            key = (msg.topic, msg.queue_id)
            if offsets.get(key, 0) <= msg.queue_offset:
                offsets[key] = msg.queue_offset + 1
            count += 1
        if msg.msg_id or msg.keys:
            batch.append(
                IndexRequest(msg.topic, msg.physical_offset, msg.size, msg.msg_id, msg.keys)
            )
            if len(batch) >= REDISPATCH_BATCH:
                index.add(batch)
                batch = []
    if batch:
        index.add(batch)
    return count


def remove_store(cfg: StoreConfig) -> None:
    """Delete a store directory entirely (tests, `rocketctl local down --purge`)."""
    shutil.rmtree(cfg.root_dir, ignore_errors=True)
