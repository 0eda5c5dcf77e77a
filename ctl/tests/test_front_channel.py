"""The local-channel bench of issue #28 (rocketcluster.ctl.bench.front_channel): its
frames refuse what they do not hold, a ring hands every frame over in order across
its wrap, and both channels carry a short real run between two processes."""

from __future__ import annotations

import os
from multiprocessing import shared_memory
from pathlib import Path

import pytest

from rocketcluster.ctl.bench.front_channel import (
    CHANNELS,
    RING_HEADER,
    MemoryLog,
    Ring,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    run_front_channel_bench,
)


def test_frames_round_trip_and_refuse_a_wrong_length() -> None:
    records = [b"a" * 10, b"", b"b" * 3000]
    frame = encode_request(7, records)
    assert decode_request(frame) == (7, records)
    with pytest.raises(ValueError, match="says"):
        decode_request(frame[:-1])
    with pytest.raises(ValueError, match="past its records"):
        decode_request(_padded(frame))
    reply = encode_reply(7, [0, 10, 10])
    assert decode_reply(reply) == (7, [0, 10, 10])
    with pytest.raises(ValueError, match="offsets"):
        decode_reply(reply[:-8])


def _padded(frame: bytes) -> bytes:
    """``frame`` with four bytes more than its records, its length field saying so."""
    grown = frame + b"\0\0\0\0"
    return len(grown).to_bytes(4, "little") + grown[4:]


def test_the_memory_log_gives_each_record_its_offset() -> None:
    log = MemoryLog()
    assert decode_reply(log.handle(encode_request(1, [b"x" * 5, b"y" * 7]))) == (1, [0, 5])
    assert decode_reply(log.handle(encode_request(2, [b"z"]))) == (2, [12])


def test_a_ring_hands_over_every_frame_in_order_across_its_wrap() -> None:
    memory = shared_memory.SharedMemory(create=True, size=RING_HEADER.size + 4096)
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        ring = Ring(memory, bell)
        ring.buf[: RING_HEADER.size] = RING_HEADER.pack(0, 0)
        sent, got = [], []
        for i in range(200):  # ~100 KB through 4 KB: the ring wraps many times
            frame = encode_request(i, [bytes([i % 251]) * (100 + i * 7 % 900)])
            if not ring.write(frame):
                got += ring.read_all()  # full: the reader frees it
                assert ring.write(frame)
            sent.append(frame)
        got += ring.read_all()
        assert got == sent
        assert ring.read_all() == []
        assert os.eventfd_read(bell) > 0  # rung for the writes
        with pytest.raises(ValueError, match="never fits"):
            ring.write(b"\0" * 5000)
    finally:
        os.close(bell)
        memory.close()
        memory.unlink()


def test_both_channels_carry_a_short_run_between_two_processes(tmp_path: Path) -> None:
    result = run_front_channel_bench(tmp_path, seconds=0.3, batches=(8,), progress=lambda _: None)
    rows = {row["channel"]: row for row in result["rows"]}
    assert set(rows) == set(CHANNELS)
    for row in rows.values():
        assert row["msgs_per_s"] > 0 and row["batch"] == 8
        assert 0 < row["round_trip_p50_ms"] <= row["round_trip_p99_ms"]
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".sock"]  # cleaned up


def test_an_unknown_channel_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of unix, shm"):
        run_front_channel_bench(tmp_path, channels=("pipe",), progress=lambda _: None)
