from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketcluster.broker.store import record
from rocketcluster.broker.store.record import MessageToStore, RecordKind


def encode(msg: MessageToStore, phys: int = 4096, qoff: int = 7) -> bytes:
    return record.encode(msg, queue_offset=qoff, physical_offset=phys, store_timestamp=99)


def test_round_trip_keeps_every_field() -> None:
    msg = MessageToStore.build(
        "orders",
        3,
        b"hello",
        tag="tagA",
        keys=("k1", "k2"),
        msg_id="ABC",
        properties={"color": "red"},
        sys_flag=record.SysFlag.FIFO,
        born_timestamp=12,
    )
    data = encode(msg)
    check = record.check_record(data, 0, 4096, 1 << 20)
    assert check.kind == RecordKind.MESSAGE and check.size == len(data)
    out = record.decode(data)
    assert (out.topic, out.queue_id, out.queue_offset, out.physical_offset) == (
        "orders",
        3,
        7,
        4096,
    )
    assert out.body == b"hello" and out.body_crc == zlib.crc32(b"hello")
    assert out.tag == "tagA" and out.keys == ("k1", "k2") and out.msg_id == "ABC"
    assert out.properties["color"] == "red"
    assert out.sys_flag == record.SysFlag.FIFO and out.born_timestamp == 12
    assert out.store_timestamp == 99 and out.tags_code == record.tags_code("tagA")
    # The properties travel on as the record's own bytes (ConsumeService sends them).
    assert out.raw_properties == msg.properties
    assert record.decode_properties(out.raw_properties) == out.properties


def test_record_at_the_wrong_position_is_rejected() -> None:
    data = encode(MessageToStore.build("t", 0, b"x"), phys=100)
    assert record.check_record(data, 0, 100, 1 << 20).kind == RecordKind.MESSAGE
    check = record.check_record(data, 0, 200, 1 << 20)
    assert check.kind is None and "physical offset" in check.reason


def test_blank_must_fill_the_rest_of_the_segment() -> None:
    blank = record.encode_blank(64) + bytes(56)
    assert record.check_record(blank, 0, 0, 64).kind == RecordKind.BLANK
    assert record.check_record(blank, 0, 0, 65).kind is None


def test_zeros_are_the_end_of_data() -> None:
    check = record.check_record(bytes(200), 0, 0, 1 << 20)
    assert check.kind is None and check.reason == "end of data"


def test_properties_reject_separators() -> None:
    try:
        record.encode_properties({"a": "x\x01y"})
    except ValueError as exc:
        assert "separator" in str(exc)
    else:
        raise AssertionError("separator accepted")


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(min_size=0, max_size=300),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=0),
    bit=st.integers(min_value=0, max_value=7),
)
def test_any_single_bit_flip_is_detected(body: bytes, position: int, flip: int, bit: int) -> None:
    data = bytearray(encode(MessageToStore.build("topic", 1, body, msg_id="id", keys=("k",))))
    index = flip % len(data)
    data[index] ^= 1 << bit
    check = record.check_record(bytes(data), 0, 4096, 1 << 20)
    assert check.kind is None, f"flip at byte {index} bit {bit} passed the checks"


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=500), cut=st.integers(min_value=0))
def test_any_truncation_is_detected(body: bytes, cut: int) -> None:
    data = encode(MessageToStore.build("topic", 0, body))
    cut_at = cut % len(data)
    assert record.check_record(data[:cut_at], 0, 4096, 1 << 20).kind is None


_text = st.text(  # no separators (below 32), no surrogates
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(
    user=st.dictionaries(_text.filter(bool), _text, max_size=5),
    msg_id=_text,
    keys=st.lists(_text.filter(lambda k: bool(k) and " " not in k), max_size=3),
    topic=st.text(alphabet="abcdefgh-_%", min_size=1, max_size=20),
)
def test_summary_agrees_with_full_decode(
    user: dict[str, str], msg_id: str, keys: list[str], topic: str
) -> None:
    """A slave dispatches what ``summarize`` reads without decoding the body or every
    property; it must be what a full decode says, whatever the properties hold."""
    msg = MessageToStore.build(
        topic, 3, b"body", msg_id=msg_id, keys=tuple(keys), properties=user, tag="t"
    )
    data = encode(msg)
    full = record.decode(data)
    summary = record.summarize(data)
    assert summary == (
        full.topic,
        full.queue_id,
        full.queue_offset,
        full.physical_offset,
        full.size,
        full.tags_code,
        full.msg_id,
        full.keys,
    )
    two = record.encode_properties({"a": "1", "b": "2"}).decode()
    assert record.property_value(two, "b") == "2"
    assert record.property_value(two, "a") == "1"
    assert record.property_value(record.encode_properties({"ab": "1"}).decode(), "b") == ""
