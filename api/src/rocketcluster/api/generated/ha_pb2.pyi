from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class Handshake(_message.Message):
    __slots__ = ("group", "broker_id", "epochs", "max_offset", "min_offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    max_offset: int
    min_offset: int
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., max_offset: _Optional[int] = ..., min_offset: _Optional[int] = ...) -> None: ...

class SlaveAck(_message.Message):
    __slots__ = ("max_offset",)
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    max_offset: int
    def __init__(self, max_offset: _Optional[int] = ...) -> None: ...

class SlaveMessage(_message.Message):
    __slots__ = ("handshake", "ack")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    handshake: Handshake
    ack: SlaveAck
    def __init__(self, handshake: _Optional[_Union[Handshake, _Mapping]] = ..., ack: _Optional[_Union[SlaveAck, _Mapping]] = ...) -> None: ...

class HandshakeReply(_message.Message):
    __slots__ = ("epochs", "master_epoch", "truncate_to", "start_offset", "reset", "refused")
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    master_epoch: int
    truncate_to: int
    start_offset: int
    reset: bool
    refused: str
    def __init__(self, epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., master_epoch: _Optional[int] = ..., truncate_to: _Optional[int] = ..., start_offset: _Optional[int] = ..., reset: _Optional[bool] = ..., refused: _Optional[str] = ...) -> None: ...

class Data(_message.Message):
    __slots__ = ("offset", "data", "epoch", "epoch_start", "confirm_offset", "master_max_offset")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    epoch: int
    epoch_start: int
    confirm_offset: int
    master_max_offset: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., epoch: _Optional[int] = ..., epoch_start: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., master_max_offset: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("confirm_offset", "master_max_offset", "master_epoch")
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    confirm_offset: int
    master_max_offset: int
    master_epoch: int
    def __init__(self, confirm_offset: _Optional[int] = ..., master_max_offset: _Optional[int] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class MasterMessage(_message.Message):
    __slots__ = ("handshake", "data", "heartbeat", "metadata")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    handshake: HandshakeReply
    data: Data
    heartbeat: Heartbeat
    metadata: Metadata
    def __init__(self, handshake: _Optional[_Union[HandshakeReply, _Mapping]] = ..., data: _Optional[_Union[Data, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., metadata: _Optional[_Union[Metadata, _Mapping]] = ...) -> None: ...

class HandoverRequest(_message.Message):
    __slots__ = ("group", "master_epoch", "target_broker_id", "timeout_ms", "hold_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    master_epoch: int
    target_broker_id: int
    timeout_ms: int
    hold_ms: int
    def __init__(self, group: _Optional[str] = ..., master_epoch: _Optional[int] = ..., target_broker_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., hold_ms: _Optional[int] = ...) -> None: ...

class HandoverReply(_message.Message):
    __slots__ = ("caught_up", "max_offset", "target_ack_offset", "waited_ms", "refused")
    CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TARGET_ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    caught_up: bool
    max_offset: int
    target_ack_offset: int
    waited_ms: int
    refused: str
    def __init__(self, caught_up: _Optional[bool] = ..., max_offset: _Optional[int] = ..., target_ack_offset: _Optional[int] = ..., waited_ms: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...
