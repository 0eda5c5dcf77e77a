"""Status helpers: errors travel in the response's ``status`` field (Code enum)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.broker.store import PutStatus

Code = pb.Code


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
    PutStatus.DISK_FULL: pb.Code.INTERNAL_SERVER_ERROR,
    PutStatus.UNKNOWN_ERROR: pb.Code.INTERNAL_ERROR,
}


def put_code(put_status: PutStatus) -> int:
    return int(_PUT_CODES.get(put_status, pb.Code.INTERNAL_ERROR))
