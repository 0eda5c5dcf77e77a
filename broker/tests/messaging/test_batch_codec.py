"""The packed batch of ConsumeService (api/client/batch_codec.py) against the broker's
own codecs: receipts are the text receipt handle's bytes, properties the commit log's
encoding, the system property names the broker's."""

from __future__ import annotations

import pytest

from rocketcluster.api.client.batch_codec import (
    MalformedBatch,
    encode_properties,
    pack_message,
    receipt_of_text,
    receipt_text,
    unpack_messages,
)
from rocketcluster.api.client.lean_message import SYSTEM_PROPERTIES, LeanMessage
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.receipt import ReceiptHandle, decode_handle
from rocketcluster.broker.store import record


def test_a_packed_receipt_is_the_text_handle_of_messaging_service() -> None:
    handle = ReceiptHandle("orders", 3, 41, 2, 987654321, 1_700_000_000_123)
    parts: list[bytes] = []
    pack_message(parts, 3, 41, 2, 987654321, 1_700_000_000_123, 5, 6, b"", b"body")
    [packed] = unpack_messages(b"".join(parts), 1)
    assert receipt_text(packed.receipt, "orders") == handle.encode()
    assert decode_handle(receipt_text(packed.receipt, "orders")) == handle
    assert receipt_of_text(handle.encode()) == packed.receipt
    assert len(receipt_of_text("not base64 at all!")) == len(packed.receipt)


def test_messages_round_trip_with_the_commit_logs_property_encoding() -> None:
    props = {"UNIQ_KEY": "ID1", "TAGS": "t", "KEYS": "a b", "__SHARDINGKEY": "g", "u": "v"}
    assert encode_properties(props) == record.encode_properties(props)
    parts: list[bytes] = []
    bodies = [b"", b"x" * 5000, bytes(range(256))]
    for i, body in enumerate(bodies):
        pack_message(parts, i, 10 + i, 1, i, 0, 100, 200, encode_properties(props), body)
    packed = list(unpack_messages(b"".join(parts), 3))
    assert [p.body for p in packed] == bodies
    assert [(p.queue_id, p.queue_offset, p.attempt) for p in packed] == [
        (i, 10 + i, 1) for i in range(3)
    ]
    msg = LeanMessage("t", *packed[1])
    parts = []  # the stored message's own queue and offset, when they are not the receipt's
    pack_message(parts, 1, 2, 1, 0, 0, 0, 0, b"", b"", message_queue_id=5, message_queue_offset=9)
    [other] = unpack_messages(b"".join(parts), 1)
    assert (other.queue_id, other.queue_offset) == (5, 9)
    assert decode_handle(receipt_text(other.receipt, "t"))[1:3] == (1, 2)
    assert (msg.message_id, msg.tag, msg.keys, msg.message_group) == ("ID1", "t", ["a", "b"], "g")
    assert msg.user_properties == {"u": "v"}
    assert msg.system_properties.queue_offset == 11


def test_a_malformed_batch_is_refused() -> None:
    parts: list[bytes] = []
    pack_message(parts, 0, 0, 1, 0, 0, 0, 0, b"", b"abc")
    data = b"".join(parts)
    with pytest.raises(MalformedBatch):
        list(unpack_messages(data[:-1], 1))
    with pytest.raises(MalformedBatch):
        list(unpack_messages(data + b"!", 1))
    with pytest.raises(MalformedBatch):
        list(unpack_messages(data, 2))


def test_the_clients_system_property_names_are_the_brokers() -> None:
    assert SYSTEM_PROPERTIES == prop.RESERVED
