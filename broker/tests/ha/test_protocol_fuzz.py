"""Fuzzing the Replicate stream's decisions (ha/protocol.py) with a fixed number of
derandomized examples: any handshake a slave could send gets a reply (a refusal with
its reason, or a cut inside the master's log), any reply or data frame a master
could send is either followed or refused with ReplicationProtocolError — never an
uncaught exception, never a cut or append somewhere the logs do not allow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import EpochEntry
from rocketcluster.broker.ha.protocol import (
    Alignment,
    ReplicationProtocolError,
    data_problem,
    epoch_table_problem,
    handshake_reply,
    plan_alignment,
)

FUZZ = settings(max_examples=300, deadline=None, derandomize=True)
I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
OFFSET = st.one_of(st.integers(0, 1 << 20), I64)
MASTER = [EpochEntry(1, 0), EpochEntry(3, 4096), EpochEntry(4, 9000)]
MASTER_MIN, MASTER_COMMITTED = 0, 12_000


def entries() -> st.SearchStrategy[list[hpb.EpochEntry]]:
    sane = st.builds(hpb.EpochEntry, epoch=st.integers(0, 6), start_offset=st.integers(0, 13_000))
    wild = st.builds(hpb.EpochEntry, epoch=I64, start_offset=I64)
    prefix = st.integers(0, len(MASTER)).map(
        lambda n: [hpb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset) for e in MASTER[:n]]
    )
    return st.one_of(st.lists(st.one_of(sane, wild), max_size=6), prefix)


@FUZZ
@given(
    broker_id=st.one_of(st.integers(0, 5), I64),
    epochs=entries(),
    max_offset=OFFSET,
    min_offset=OFFSET,
    master_min=st.sampled_from([0, 4096, 20_000]),
)
def test_any_handshake_gets_a_reply_within_the_log(
    broker_id: int,
    epochs: list[hpb.EpochEntry],
    max_offset: int,
    min_offset: int,
    master_min: int,
) -> None:
    hs = hpb.Handshake(
        group="g", broker_id=broker_id, epochs=epochs, max_offset=max_offset, min_offset=min_offset
    )
    committed = max(MASTER_COMMITTED, master_min)
    reply = handshake_reply(hs, MASTER, committed, master_min, 4)
    if reply.refused:
        assert reply.refused.startswith("bad handshake: ")
        return
    assert broker_id >= 0 and 0 <= min_offset <= max_offset
    assert (
        epoch_table_problem([EpochEntry(e.epoch, e.start_offset) for e in epochs], max_offset)
        is None
    )
    assert reply.truncate_to == reply.start_offset
    assert master_min <= reply.start_offset <= committed
    if reply.reset:
        assert reply.start_offset == master_min
    else:
        assert reply.truncate_to <= max_offset  # a cut, never a jump past the slave's end
    # What the master answers, its slave can follow (or it is told to start over).
    plan = plan_alignment(reply, max_offset)
    assert plan.action in ("reset", "truncate", "keep")


@FUZZ
@given(
    truncate_to=OFFSET,
    start_offset=OFFSET,
    reset=st.booleans(),
    refused=st.sampled_from(["", "not the master"]),
    write_offset=st.integers(0, 1 << 20),
)
def test_any_reply_is_followed_or_refused(
    truncate_to: int, start_offset: int, reset: bool, refused: str, write_offset: int
) -> None:
    reply = hpb.HandshakeReply(
        truncate_to=truncate_to, start_offset=start_offset, reset=reset, refused=refused
    )
    try:
        plan = plan_alignment(reply, write_offset)
    except ReplicationProtocolError as exc:
        assert str(exc)
        return
    assert not refused and plan.offset >= 0
    if plan.action == "truncate":
        assert plan.offset < write_offset
    elif plan.action == "keep":
        assert plan == Alignment("keep", write_offset)
    else:
        assert reset and plan.offset == start_offset


@FUZZ
@given(
    offset=OFFSET,
    data=st.binary(max_size=4),
    epoch=st.one_of(st.integers(0, 6), I64),
    epoch_start=OFFSET,
    confirm=OFFSET,
    master_max=OFFSET,
    last=st.one_of(st.none(), st.sampled_from(MASTER)),
    write_offset=st.integers(0, 20_000),
)
def test_any_data_frame_is_judged(
    offset: int,
    data: bytes,
    epoch: int,
    epoch_start: int,
    confirm: int,
    master_max: int,
    last: EpochEntry | None,
    write_offset: int,
) -> None:
    frame = hpb.Data(
        offset=offset,
        data=data,
        epoch=epoch,
        epoch_start=epoch_start,
        confirm_offset=confirm,
        master_max_offset=master_max,
    )
    problem = data_problem(frame, write_offset, last)
    if problem is not None:
        assert isinstance(problem, str) and problem
        return
    assert offset == write_offset and data
    assert 0 <= epoch_start <= offset
    if last is not None:
        assert epoch >= last.epoch
        assert epoch_start >= last.start_offset
