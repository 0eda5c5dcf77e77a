"""What replication needs from a store: append a master's raw bytes, cut a diverged
tail, or start over at a master's offset.

A slave's commit log is a byte-for-byte copy of its master's, so records keep their
commit-log and queue offsets across failovers: a message never shows up under two
offsets. Every copied record is checked (CRC, position) before it is written, and
its consume-queue and index entries are dispatched like those of a local write —
only up to the confirm offset the master sends.
"""

from __future__ import annotations

from rocketcluster.broker.store.errors import StoreError
from rocketcluster.broker.store.message_store import MessageStore
from rocketcluster.broker.store.record import DispatchRequest
from rocketcluster.broker.store.record_scan import scan_batch


def scan_records(data: bytes, offset: int, segment_size: int) -> list[DispatchRequest]:
    """Check every record in ``data`` (copied from ``offset``) and describe the messages
    one by one (tests and tools; replication keeps the columns ``scan_batch`` makes).

    Raises CorruptRecordError when a record fails its checks or ``data`` ends inside
    one: replication sends whole records only.
    """
    batch = scan_batch(data, offset, segment_size)
    return batch.requests(0, len(batch))


def append_replicated(store: MessageStore, offset: int, data: bytes) -> int:
    """Append bytes copied from the master at ``offset``; returns the new end."""
    clog = store.commitlog
    if offset != clog.write_offset:
        raise StoreError(f"replicated data at {offset}, but this log ends at {clog.write_offset}")
    batch = scan_batch(data, offset, clog.segment_size)
    clog.append_raw(offset, data)
    offsets = clog.queue_offsets
    for run in batch.runs:
        key = (run.topic, run.queue_id)
        if offsets.get(key, 0) < run.end_offset:
            offsets[key] = run.end_offset
    store.dispatcher.add_scanned(batch)
    store.flush_service.written()
    store.retry_stalled_dispatch()
    return clog.write_offset


def truncate_to(store: MessageStore, offset: int) -> None:
    """Cut the log (and everything derived from it) at ``offset``."""
    clog = store.commitlog
    if offset >= clog.write_offset:
        return
    store.dispatcher.drop_from(offset)
    for seg in clog.truncate(offset):
        seg.path.unlink(missing_ok=True)
    store.queues.truncate_from_physical(offset)
    _rebuild_queue_offsets(store)
    confirm = store.confirm_offset
    if confirm is not None and confirm > offset:
        store.set_confirm_offset(offset)


def reset_to(store: MessageStore, start: int) -> None:
    """Drop the whole log and start empty at ``start`` (a segment start of the
    master): for a slave too far behind its master, or one that shares no history."""
    clog = store.commitlog
    store.dispatcher.drop_from(clog.min_offset)
    for seg in clog.truncate(clog.min_offset):
        seg.path.unlink(missing_ok=True)
    clog.set_empty_start(start)
    store.queues.reset()
    clog.queue_offsets = {}
    store.set_confirm_offset(start)


def _rebuild_queue_offsets(store: MessageStore) -> None:
    offsets = {(cq.topic, cq.queue_id): cq.max_index for cq in store.queues}
    for req in store.dispatcher.pending_requests():
        key = (req.topic, req.queue_id)
        offsets[key] = max(offsets.get(key, 0), req.queue_offset + 1)
    store.commitlog.queue_offsets = offsets
