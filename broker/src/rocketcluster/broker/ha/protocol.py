"""The pure decisions of the Replicate stream, on plain messages (no store, no I/O):
what a master answers a slave's handshake, how a slave aligns its log to the reply,
and whether a Data frame may be appended. Both sides check what the other sent —
a peer with a bug (or one that is not a broker) is refused with the reason, never
allowed to cut a log somewhere absurd."""

from __future__ import annotations

from typing import NamedTuple

from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import EpochEntry, consistent_point

# How many epochs a handshake may list: one per master change, so thousands is
# already absurd; bounds the work a handshake costs the master.
MAX_HANDSHAKE_EPOCHS = 100_000


class ReplicationProtocolError(ValueError):
    """A peer sent a message that breaks the Replicate protocol; the stream ends."""


def epoch_table_problem(entries: list[EpochEntry], max_offset: int) -> str | None:
    """Why an epoch table cannot describe a log ending at ``max_offset``, or None:
    epochs rise strictly, start offsets never fall, none starts past the end."""
    previous: EpochEntry | None = None
    for entry in entries:
        if entry.epoch < 0 or entry.start_offset < 0:
            return f"negative epoch entry {tuple(entry)}"
        if entry.start_offset > max_offset:
            return f"epoch {entry.epoch} starts at {entry.start_offset}, past the end {max_offset}"
        if previous is not None and (
            entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset
        ):
            return f"epoch entries out of order: {tuple(previous)} then {tuple(entry)}"
        previous = entry
    return None


def handshake_problem(hs: hpb.Handshake) -> str | None:
    """Why the master must refuse a slave's handshake, or None."""
    if hs.broker_id < 0:
        return f"broker id {hs.broker_id} is negative"
    if hs.min_offset < 0 or hs.max_offset < hs.min_offset:
        return f"log range [{hs.min_offset}, {hs.max_offset}) is not a range"
    if len(hs.epochs) > MAX_HANDSHAKE_EPOCHS:
        return f"{len(hs.epochs)} epochs listed (at most {MAX_HANDSHAKE_EPOCHS})"
    entries = [EpochEntry(e.epoch, e.start_offset) for e in hs.epochs]
    return epoch_table_problem(entries, hs.max_offset)


def handshake_reply(
    hs: hpb.Handshake,
    mine: list[EpochEntry],
    committed_offset: int,
    min_offset: int,
    master_epoch: int,
) -> hpb.HandshakeReply:
    """The master's answer: where the slave's log stops agreeing with this one
    (``truncate_to``), or a reset to this log's first segment when they share nothing
    (or the shared part is already deleted here); ``refused`` for a bad handshake."""
    problem = handshake_problem(hs)
    if problem:
        return hpb.HandshakeReply(refused=f"bad handshake: {problem}")
    theirs = [EpochEntry(e.epoch, e.start_offset) for e in hs.epochs]
    reply = hpb.HandshakeReply(
        epochs=[hpb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset) for e in mine],
        master_epoch=master_epoch,
    )
    fresh = hs.max_offset == hs.min_offset and not theirs
    cp = None if fresh else consistent_point(mine, committed_offset, theirs, hs.max_offset)
    if cp is None or cp < min_offset:
        reply.reset = True
        reply.truncate_to = reply.start_offset = min_offset
    else:
        reply.truncate_to = reply.start_offset = cp
    return reply


class Alignment(NamedTuple):
    """What a slave does to its log before data flows: ``reset`` (start over empty
    at ``offset``), ``truncate`` (cut back to ``offset``) or ``keep``."""

    action: str
    offset: int


def plan_alignment(reply: hpb.HandshakeReply, write_offset: int) -> Alignment:
    """The slave's reading of the master's handshake reply."""
    if reply.refused:
        raise ReplicationProtocolError(f"the master refused: {reply.refused}")
    if reply.truncate_to < 0 or reply.start_offset < 0:
        raise ReplicationProtocolError(
            f"negative offsets in the handshake reply ({reply.truncate_to}, {reply.start_offset})"
        )
    if reply.reset:
        return Alignment("reset", reply.start_offset)
    if reply.start_offset != reply.truncate_to:
        raise ReplicationProtocolError(
            f"the reply starts data at {reply.start_offset} but cuts at {reply.truncate_to}"
        )
    if reply.truncate_to > write_offset:
        raise ReplicationProtocolError(
            f"the master would start at {reply.truncate_to}, past this log's end {write_offset}"
        )
    if reply.truncate_to < write_offset:
        return Alignment("truncate", reply.truncate_to)
    return Alignment("keep", write_offset)


def data_problem(data: hpb.Data, write_offset: int, last_epoch: EpochEntry | None) -> str | None:
    """Why a Data frame cannot be appended to a log ending at ``write_offset`` whose
    newest epoch is ``last_epoch``, or None (the records themselves are checked
    one by one when appended)."""
    if data.offset != write_offset:
        return f"data at {data.offset}, but this log ends at {write_offset}"
    if not data.data:
        return "an empty data frame"
    if data.epoch_start < 0 or data.epoch_start > data.offset:
        return f"epoch {data.epoch} starts at {data.epoch_start}, after the data at {data.offset}"
    if data.confirm_offset < 0 or data.master_max_offset < 0:
        return "negative confirm or max offset"
    if last_epoch is not None:
        if data.epoch < last_epoch.epoch:
            return f"data of epoch {data.epoch} after epoch {last_epoch.epoch}"
        if data.epoch == last_epoch.epoch and data.epoch_start != last_epoch.start_offset:
            return (
                f"epoch {data.epoch} said to start at {data.epoch_start}, "
                f"known to start at {last_epoch.start_offset}"
            )
        if data.epoch > last_epoch.epoch and data.epoch_start < last_epoch.start_offset:
            return f"epoch {data.epoch} starts before epoch {last_epoch.epoch}"
    return None
