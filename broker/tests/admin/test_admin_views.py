"""The pieces the console's admin routes share, without a broker: a stored message's
view (user properties apart from the broker's), the HTTP status of each messaging
refusal, and a slave's 409 naming its master."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fastapi import HTTPException

from rocketcluster.broker.admin.views import (
    PREVIEW_BYTES,
    http_error,
    message_view,
    require_master,
)
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.store.record import StoredMessage, encode_properties


def _stored(body: bytes, props: dict[str, str]) -> StoredMessage:
    return StoredMessage(
        topic="t",
        queue_id=1,
        queue_offset=7,
        physical_offset=4096,
        size=300,
        body=body,
        body_crc=0xABC,
        raw_properties=encode_properties(props),
        tags_code=0,
        sys_flag=0,
        born_timestamp=1000,
        store_timestamp=2000,
    )


def test_a_view_keeps_the_broker_s_properties_apart() -> None:
    props = {
        "region": "eu",
        prop.MESSAGE_ID: "01AB",
        prop.TAGS: "red",
        prop.KEYS: "k1 k2",
        prop.BORN_HOST: "10.0.0.7",
        prop.DLQ_DELIVERY_ATTEMPTS: "3",
        prop.RESEND_GROUP: "g",
    }
    view = message_view(_stored(b"\xff" * (PREVIEW_BYTES + 1), props))
    assert view["properties"] == {"region": "eu"}
    assert view["systemProperties"] == {k: v for k, v in props.items() if k != "region"}
    assert view["messageId"] == "01AB" and view["tag"] == "red" and view["keys"] == ["k1", "k2"]
    assert view["bornHost"] == "10.0.0.7" and view["storeHost"] is None
    assert view["bodySize"] == PREVIEW_BYTES + 1 and view["bodyTruncated"] is True
    assert view["bodyText"] is None and view["bodyCrc32"] == "00000ABC"
    assert base64.b64decode(view["bodyBase64"]) == b"\xff" * PREVIEW_BYTES
    plain = message_view(_stored(b"hi", {prop.MESSAGE_ID: "x"}))
    assert plain["bodyText"] == "hi" and plain["bodyTruncated"] is False
    assert plain["bornHost"] is None and plain["tag"] is None


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (Code.TOPIC_NOT_FOUND, 404),
        (Code.MESSAGE_BODY_TOO_LARGE, 413),
        (Code.MESSAGE_PROPERTIES_TOO_LARGE, 413),
        (Code.MESSAGE_BODY_EMPTY, 400),
        (Code.ILLEGAL_MESSAGE_TAG, 400),
        (Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, 422),
        (Code.FORBIDDEN, 409),
        (Code.TOO_MANY_REQUESTS, 429),
        (Code.HA_NOT_AVAILABLE, 503),
        (Code.SLAVE_PERSISTENCE_TIMEOUT, 503),
        (Code.INTERNAL_ERROR, 500),
        (Code.OK, 500),  # never an answer to map: not a success either
    ],
)
def test_messaging_codes_become_http_statuses(code: int, status: int) -> None:
    error = http_error(code, "why")
    assert (error.status_code, error.detail) == (status, "why")


def _runtime(role: Any) -> MessagingRuntime:
    return cast(MessagingRuntime, SimpleNamespace(role=role, config=SimpleNamespace(group="bg-1")))


def _role(role: str, master: str) -> Any:
    return SimpleNamespace(
        role=role, master_client_endpoint=master, is_master=lambda: role == "master"
    )


def test_writes_go_to_the_master() -> None:
    require_master(_runtime(None), "sending")  # a standalone broker is its own master
    require_master(_runtime(_role("master", "10.0.0.1:8081")), "sending")
    with pytest.raises(HTTPException) as known:
        require_master(_runtime(_role("slave", "10.0.0.1:8081")), "sending a message")
    assert known.value.status_code == 409
    assert "slave of group bg-1" in str(known.value.detail)
    assert "10.0.0.1:8081" in str(known.value.detail)
    with pytest.raises(HTTPException) as unknown:
        require_master(_runtime(_role("no-master", "")), "resending dead letters")
    assert unknown.value.status_code == 409 and "none is known" in str(unknown.value.detail)
