"""Store errors (unexpected conditions) and result statuses (expected outcomes)."""

from __future__ import annotations

from enum import StrEnum


class PutStatus(StrEnum):
    """Outcome of a put, named as RocketMQ's PutMessageStatus where one exists."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetStatus(StrEnum):
    """Outcome of a read from a consume queue (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"


class StoreError(Exception):
    """Base class of store errors; the message says what happened and what to do."""


class StoreLockedError(StoreError):
    def __init__(self, root: str, holder: str) -> None:
        super().__init__(
            f"store {root} is in use by another process ({holder}); stop it first "
            "or point this broker at another storage directory"
        )
        self.root = root
        self.holder = holder


class StoreClosedError(StoreError):
    def __init__(self) -> None:
        super().__init__("the store is closed")


class DiskFullError(StoreError):
    def __init__(self, path: str, needed: int, detail: str = "") -> None:
        super().__init__(
            f"no space left on the device holding {path} (needed {needed} bytes{detail}); "
            "free space or lower retention — nothing already stored was changed"
        )
        self.path = path
        self.needed = needed


class ReadPastEndError(StoreError):
    def __init__(self, offset: int, size: int, max_offset: int) -> None:
        super().__init__(
            f"read of {size} bytes at {offset} goes past the end of the commit log ({max_offset})"
        )
        self.offset = offset
        self.size = size
        self.max_offset = max_offset


class OffsetRemovedError(StoreError):
    def __init__(self, offset: int, min_offset: int) -> None:
        super().__init__(
            f"commit log offset {offset} was removed by retention (first offset {min_offset})"
        )
        self.offset = offset
        self.min_offset = min_offset


class CorruptRecordError(StoreError):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"record at commit log offset {offset} failed its checks: {reason}")
        self.offset = offset
        self.reason = reason


class InvalidNameError(StoreError, ValueError):
    def __init__(self, kind: str, name: str, reason: str) -> None:
        super().__init__(f"invalid {kind} name {name!r}: {reason}")
        self.kind = kind
        self.name = name
        self.reason = reason
