from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Entry(_message.Message):
    __slots__ = ("term", "index", "data")
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    term: int
    index: int
    data: bytes
    def __init__(self, term: _Optional[int] = ..., index: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("index", "term", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    data: bytes
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class RaftMessage(_message.Message):
    __slots__ = ("type", "to", "term", "log_term", "index", "entries", "commit", "snapshot", "has_snapshot", "reject", "reject_hint", "transfer")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    HAS_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    REJECT_HINT_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    type: int
    to: int
    term: int
    log_term: int
    index: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    commit: int
    snapshot: Snapshot
    has_snapshot: bool
    reject: bool
    reject_hint: int
    transfer: bool
    def __init__(self, type: _Optional[int] = ..., to: _Optional[int] = ..., term: _Optional[int] = ..., log_term: _Optional[int] = ..., index: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., commit: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., has_snapshot: _Optional[bool] = ..., reject: _Optional[bool] = ..., reject_hint: _Optional[int] = ..., transfer: _Optional[bool] = ..., **kwargs) -> None: ...

class RaftBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[RaftMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[RaftMessage, _Mapping]]] = ...) -> None: ...

class RaftAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ControllerReply(_message.Message):
    __slots__ = ("code", "message", "leader", "json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    leader: str
    json: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., leader: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class ApplyBrokerIdRequest(_message.Message):
    __slots__ = ("cluster", "group", "broker_id", "address", "check_code")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CHECK_CODE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    group: str
    broker_id: int
    address: str
    check_code: str
    def __init__(self, cluster: _Optional[str] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., check_code: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster", "group", "broker_id", "address", "client_endpoint")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    group: str
    broker_id: int
    address: str
    client_endpoint: str
    def __init__(self, cluster: _Optional[str] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., client_endpoint: _Optional[str] = ...) -> None: ...

class BrokerHeartbeat(_message.Message):
    __slots__ = ("cluster", "group", "broker_id", "address", "epoch", "max_offset", "confirm_offset", "election_priority", "timeout_ms", "seen_master_epoch")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SEEN_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    group: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    timeout_ms: int
    seen_master_epoch: int
    def __init__(self, cluster: _Optional[str] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., election_priority: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., seen_master_epoch: _Optional[int] = ...) -> None: ...

class AlterSyncStateSetRequest(_message.Message):
    __slots__ = ("group", "master_id", "master_epoch", "sync_state_set_epoch", "sync_state_set")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    group: str
    master_id: int
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, group: _Optional[str] = ..., master_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectMasterRequest(_message.Message):
    __slots__ = ("group", "broker_id", "designated", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    DESIGNATED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    designated: bool
    reason: str
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ..., designated: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class GetReplicaInfoRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class WatchRolesRequest(_message.Message):
    __slots__ = ("group", "broker_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class RoleChange(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class GetCatalogueRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    def __init__(self, known_version: _Optional[int] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ("topic", "queues", "message_type", "groups", "delete")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: int
    message_type: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    delete: bool
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[int] = ..., message_type: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., delete: _Optional[bool] = ...) -> None: ...
