"""Receipt handles name the broker group that delivered them (so an ack sent to another
group finds its way back), and the handles minted before that still work."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

import pytest

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.api.client.batch_codec import RECEIPT, receipt_of_text, receipt_text
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging.codes import Code, ForeignReceipt, MessagingError
from rocketcluster.broker.messaging.filters import FilterCache
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop import PopService
from rocketcluster.broker.messaging.receipt import (
    InvalidReceiptHandle,
    ReceiptHandle,
    decode_handle,
)
from rocketcluster.broker.store import MessageStore, MessageToStore, StoredMessage
from rocketcluster.ctl.testing import small_store_config


def _raw(body: bytes) -> str:
    """A handle text around ``body``, with a valid checksum."""
    crc = zlib.crc32(body).to_bytes(4, "big")
    return base64.urlsafe_b64encode(body + crc).decode().rstrip("=")


def test_a_handle_names_its_group_and_round_trips() -> None:
    handle = ReceiptHandle("orders", 3, 41, 2, 987654321, 1_700_000_000_123, "prod-broker-1")
    assert decode_handle(handle.encode()) == handle
    assert decode_handle(handle.encode()).group == "prod-broker-1"


def test_a_handle_without_a_group_is_the_version_one_handle() -> None:
    """Handles minted before groups were named decode as before, with no group: they
    belong to whichever broker reads them."""
    old = ReceiptHandle("orders", 3, 41, 2, 987654321, 1_700_000_000_123)
    assert old.encode() == receipt_text(
        RECEIPT.pack(1, 3, 41, 2, 987654321, 1_700_000_000_123), "orders"
    )
    assert decode_handle(old.encode()).group == ""


def test_a_grouped_handle_packs_as_the_receipt_consume_service_takes() -> None:
    grouped = ReceiptHandle("t", 1, 2, 3, 4, 5, "g-0")
    assert receipt_of_text(grouped.encode()) == RECEIPT.pack(1, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (RECEIPT.pack(2, 0, 0, 1, 0, 0), "cut short"),  # no group length at all
        (RECEIPT.pack(2, 0, 0, 1, 0, 0) + bytes((9,)) + b"abc", "cut short"),
        (RECEIPT.pack(7, 0, 0, 1, 0, 0) + b"t", "version 7"),
        (RECEIPT.pack(2, 0, 0, 1, 0, 0) + bytes((2,)) + b"\xff\xfe" + b"t", "UTF-8"),
    ],
)
def test_malformed_grouped_handles_are_refused(body: bytes, why: str) -> None:
    with pytest.raises(InvalidReceiptHandle, match=why):
        decode_handle(_raw(body))


def test_a_group_name_longer_than_a_handle_holds_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 255"):
        ReceiptHandle("t", 0, 0, 1, 0, 0, "g" * 256).encode()


TOPIC = TopicSpec(name="t", queues=2)
GROUP = ConsumerGroupSpec(name="g")


def _dead_letter(group: str, msg: StoredMessage, attempts: int) -> MessageToStore:
    return MessageToStore.build(f"%DLQ%{group}", 0, msg.body, msg_id=msg.msg_id)


async def test_a_broker_mints_handles_of_its_group_and_refers_others_to_theirs(
    tmp_path: Path,
) -> None:
    store = await MessageStore.open(small_store_config(tmp_path / "s"))
    try:
        pop = PopService(
            store,
            ArrivalNotifier(),
            MessagingTuning(),
            _dead_letter,
            group_spec=lambda name: GROUP if name == "g" else None,
            broker_group="here",
        )
        pop.promote()
        await store.put_batch([MessageToStore.build("t", 0, b"one", msg_id="M" * 32)])
        [delivery] = await pop.receive(
            GROUP,
            TOPIC,
            -1,
            FilterCache().get("TAG", "*"),
            1,
            60_000,
            auto_renew=False,
            client_id="c",
            wait_seconds=0,
        )
        assert decode_handle(delivery.handle).group == "here"
        renewed = pop.change_invisible("g", "t", delivery.handle, 30_000)
        assert decode_handle(renewed).group == "here"

        elsewhere = delivery.receipt._replace(group="there").encode()
        for attempt in (
            lambda: pop.ack("g", "t", elsewhere),
            lambda: pop.change_invisible("g", "t", elsewhere, 1000),
        ):
            with pytest.raises(ForeignReceipt) as caught:
                attempt()
            assert caught.value.group == "there"
            assert caught.value.code == Code.INVALID_RECEIPT_HANDLE
        assert pop.state("g", "t", delivery.receipt.queue_id).inflight  # untouched

        # A version 1 handle of the same delivery is this broker's: the ack works.
        pop.ack("g", "t", delivery.receipt._replace(group="").encode())
        assert not pop.state("g", "t", delivery.receipt.queue_id).inflight
        with pytest.raises(MessagingError, match="never delivered"):
            pop.ack("g", "t", delivery.receipt._replace(group="", queue_offset=99).encode())
    finally:
        await store.close()
