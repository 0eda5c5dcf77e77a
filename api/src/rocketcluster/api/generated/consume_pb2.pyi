from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReceiveBatchRequest(_message.Message):
    __slots__ = ("group", "topic", "batch_size", "invisible_ms", "auto_renew", "long_polling_ms", "sql", "expression", "max_bytes")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    AUTO_RENEW_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLING_MS_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    batch_size: int
    invisible_ms: int
    auto_renew: bool
    long_polling_ms: int
    sql: bool
    expression: str
    max_bytes: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., batch_size: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., auto_renew: _Optional[bool] = ..., long_polling_ms: _Optional[int] = ..., sql: _Optional[bool] = ..., expression: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReceiveBatchReply(_message.Message):
    __slots__ = ("status", "count", "records", "invisible_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    count: int
    records: bytes
    invisible_ms: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., count: _Optional[int] = ..., records: _Optional[bytes] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class AckBatchRequest(_message.Message):
    __slots__ = ("group", "topic", "receipts")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipts: bytes
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipts: _Optional[bytes] = ...) -> None: ...

class EntryStatus(_message.Message):
    __slots__ = ("index", "status")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    index: int
    status: Status
    def __init__(self, index: _Optional[int] = ..., status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class AckBatchReply(_message.Message):
    __slots__ = ("status", "failed")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    failed: _containers.RepeatedCompositeFieldContainer[EntryStatus]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., failed: _Optional[_Iterable[_Union[EntryStatus, _Mapping]]] = ...) -> None: ...
