"""The front channel's frames: whole frames out of any split of the stream, and a
clear error for bytes that are not frames."""

from __future__ import annotations

import marshal
import random

import pytest

from rocketcluster.broker.front import frames as f


def test_frames_survive_any_split_of_the_stream() -> None:
    sent = [
        (f.CALL, 1, 3, 2.5, "ipv4:127.0.0.1:5000", (("x-mq-client-id", "c1"),), b"\x00" * 100),
        (f.REPLY, 1, b"answer"),
        (f.STATS, 4, {"maxConnections": 2}, [("SendMessage", 40100, 0.001)]),
        (f.END, 9, None),
    ]
    stream = b"".join(f.encode(frame) for frame in sent)
    rng = random.Random(7)
    for _ in range(50):
        decoder = f.FrameDecoder()
        got: list[tuple[object, ...]] = []
        at = 0
        while at < len(stream):
            step = rng.randint(1, 40)
            got += decoder.feed(stream[at : at + step])
            at += step
        assert got == sent
        assert decoder.pending == 0


def test_a_frame_that_is_not_a_tuple_is_refused() -> None:
    body = marshal.dumps([1, 2])
    with pytest.raises(f.FrameError, match="not a tuple"):
        f.FrameDecoder().feed(f.LENGTH.pack(len(body)) + body)


def test_garbage_is_refused() -> None:
    with pytest.raises(f.FrameError, match="does not decode"):
        f.FrameDecoder().feed(f.LENGTH.pack(3) + b"\xff\xfe\xfd")


def test_an_oversized_length_is_refused_before_buffering() -> None:
    with pytest.raises(f.FrameError, match="a frame of"):
        f.FrameDecoder().feed(f.LENGTH.pack(f.MAX_FRAME_BYTES + 1))


def test_the_method_table_covers_both_services() -> None:
    names = {(m.service.rsplit(".", 1)[1], m.name): m.kind for m in f.METHODS}
    assert names[("MessagingService", "SendMessage")] == f.UNARY
    assert names[("MessagingService", "ReceiveMessage")] == f.SERVER_STREAM
    assert names[("MessagingService", "Telemetry")] == f.BIDI
    assert names[("ConsumeService", "ReceiveBatch")] == f.UNARY
    assert len(f.table_digest()) == 16
