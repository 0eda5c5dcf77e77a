"""A failed request of the lean workload is counted under a line that says what
failed: a gRPC error's status and details (its ``str`` begins with "<AioRpcError of
RPC that terminated with:", which named nothing when a switchover test failed)."""

from __future__ import annotations

import grpc

from rocketcluster.ctl.lean_workload import failure_text


def test_a_grpc_error_is_its_status_and_details() -> None:
    error = grpc.aio.AioRpcError(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="Deadline Exceeded",
    )
    assert failure_text(error) == "DEADLINE_EXCEEDED: Deadline Exceeded"


def test_other_errors_are_their_first_line() -> None:
    assert failure_text(ConnectionError("refused\nmore")) == "refused"
    assert failure_text(TimeoutError()) == "TimeoutError"
