"""Status helpers: errors travel in the response's ``status`` field (Code enum)."""

from __future__ import annotations

from typing import Final

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.broker.store import PutStatus


class Code:
    """The protocol's status codes as plain ints: the generated enum wrapper resolves
    names through a Python ``__getattr__``, too slow for per-message paths."""

    CODE_UNSPECIFIED: Final = 0
    OK: Final = 20000
    MULTIPLE_RESULTS: Final = 30000
    BAD_REQUEST: Final = 40000
    ILLEGAL_ACCESS_POINT: Final = 40001
    ILLEGAL_TOPIC: Final = 40002
    ILLEGAL_CONSUMER_GROUP: Final = 40003
    ILLEGAL_MESSAGE_TAG: Final = 40004
    ILLEGAL_MESSAGE_KEY: Final = 40005
    ILLEGAL_MESSAGE_GROUP: Final = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY: Final = 40007
    INVALID_TRANSACTION_ID: Final = 40008
    ILLEGAL_MESSAGE_ID: Final = 40009
    ILLEGAL_FILTER_EXPRESSION: Final = 40010
    ILLEGAL_INVISIBLE_TIME: Final = 40011
    ILLEGAL_DELIVERY_TIME: Final = 40012
    INVALID_RECEIPT_HANDLE: Final = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: Final = 40014
    UNRECOGNIZED_CLIENT_TYPE: Final = 40015
    MESSAGE_CORRUPTED: Final = 40016
    CLIENT_ID_REQUIRED: Final = 40017
    ILLEGAL_POLLING_TIME: Final = 40018
    ILLEGAL_OFFSET: Final = 40019
    ILLEGAL_LITE_TOPIC: Final = 40020
    UNAUTHORIZED: Final = 40100
    PAYMENT_REQUIRED: Final = 40200
    FORBIDDEN: Final = 40300
    NOT_FOUND: Final = 40400
    MESSAGE_NOT_FOUND: Final = 40401
    TOPIC_NOT_FOUND: Final = 40402
    CONSUMER_GROUP_NOT_FOUND: Final = 40403
    OFFSET_NOT_FOUND: Final = 40404
    REQUEST_TIMEOUT: Final = 40800
    PAYLOAD_TOO_LARGE: Final = 41300
    MESSAGE_BODY_TOO_LARGE: Final = 41301
    MESSAGE_BODY_EMPTY: Final = 41302
    PRECONDITION_FAILED: Final = 42800
    TOO_MANY_REQUESTS: Final = 42900
    LITE_TOPIC_QUOTA_EXCEEDED: Final = 42901
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED: Final = 42902
    REQUEST_HEADER_FIELDS_TOO_LARGE: Final = 43100
    MESSAGE_PROPERTIES_TOO_LARGE: Final = 43101
    INTERNAL_ERROR: Final = 50000
    INTERNAL_SERVER_ERROR: Final = 50001
    HA_NOT_AVAILABLE: Final = 50002
    NOT_IMPLEMENTED: Final = 50100
    PROXY_TIMEOUT: Final = 50400
    MASTER_PERSISTENCE_TIMEOUT: Final = 50401
    SLAVE_PERSISTENCE_TIMEOUT: Final = 50402
    UNSUPPORTED: Final = 50500
    VERSION_UNSUPPORTED: Final = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED: Final = 50502
    FAILED_TO_CONSUME_MESSAGE: Final = 60000


OK: Final = Code.OK


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


OK_STATUS = status(pb.Code.OK, "OK")


class MessagingError(Exception):
    """An expected failure of a request: becomes a status with this code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_status(self) -> pb.Status:
        return status(self.code, self.message)


class ForeignReceipt(MessagingError):
    """A receipt handle another broker group minted (a receive that group answered for
    this one: cross_group.py): the request belongs to ``group``."""

    def __init__(self, group: str) -> None:
        super().__init__(
            Code.INVALID_RECEIPT_HANDLE, f"the receipt handle belongs to broker group {group!r}"
        )
        self.group = group


_PUT_CODES = {
    PutStatus.PUT_OK: pb.Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: pb.Code.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: pb.Code.HA_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: pb.Code.INTERNAL_SERVER_ERROR,
    PutStatus.CREATE_MAPPED_FILE_FAILED: pb.Code.INTERNAL_SERVER_ERROR,
    PutStatus.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
    # TOO_MANY_REQUESTS: the official clients treat it as "back off" — the Java producer
    # retries after its backoff delay instead of at once, the Python one gives up at
    # once (no immediate retries hammering a full disk) — and the message says why.
    # INTERNAL_SERVER_ERROR made both retry at once and reported a broken broker.
    PutStatus.DISK_FULL: pb.Code.TOO_MANY_REQUESTS,
    PutStatus.UNKNOWN_ERROR: pb.Code.INTERNAL_ERROR,
}


def put_code(put_status: PutStatus) -> int:
    return int(_PUT_CODES.get(put_status, pb.Code.INTERNAL_ERROR))
