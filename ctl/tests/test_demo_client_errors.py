"""The official client's complaints, counted by kind (client_errors.py): the pure
naming of error kinds, and the capture against the real client's logger and its real
heartbeat callback."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from concurrent.futures import Future

import grpc
import pytest
from grpc import aio
from rocketmq.v5.client.client import Client
from rocketmq.v5.exception import ClientException

from rocketcluster.ctl.client_errors import (
    CLIENT_LOGGER,
    capture_client_errors,
    error_kind,
    kind_of_text,
    operation_of_text,
    summarise,
)


@pytest.fixture(autouse=True)
def bare_futures_logger() -> Iterator[None]:
    """These tests look at ``concurrent.futures``' logger as a fresh process has it.
    Other tests of the session may have called ``quiet_official_client()``, which
    filters that logger for the rest of the process; their filters come back after."""
    futures = logging.getLogger("concurrent.futures")
    saved = list(futures.filters)
    for f in saved:
        futures.removeFilter(f)
    try:
        yield
    finally:
        for f in list(futures.filters):
            futures.removeFilter(f)
        for f in saved:
            futures.addFilter(f)


def _unavailable() -> aio.AioRpcError:
    return aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, aio.Metadata(), aio.Metadata(), details="failed to connect"
    )


def test_error_kind_names_the_status_not_the_first_line() -> None:
    exc = _unavailable()
    assert str(exc).splitlines()[0] == "<AioRpcError of RPC that terminated with:"
    assert error_kind(exc) == "UNAVAILABLE"
    assert error_kind(ClientException("persistence timeout", 50401)) == "MASTER_PERSISTENCE_TIMEOUT"
    assert error_kind(ClientException("odd", 12345)) == "code 12345"
    assert error_kind(ClientException("no code")) == "ClientException"
    assert error_kind(TimeoutError("slow")) == "TimeoutError"


def test_kind_of_a_log_line() -> None:
    assert kind_of_text(f"send message exception, topic: orders, e: {_unavailable()}") == (
        "UNAVAILABLE"
    )
    assert kind_of_text("send message exception, topic: orders, e: 40402, no route") == (
        "TOPIC_NOT_FOUND"
    )
    assert kind_of_text("send heartbeat to x error, code:50002, message:m.") == "HA_NOT_AVAILABLE"
    assert kind_of_text("get local ip exception: [Errno 101] Network is unreachable") == (
        "Network is unreachable"
    )
    assert kind_of_text("something else went wrong") == "other"


def test_operation_of_a_log_line() -> None:
    assert operation_of_text("PRODUCER x send heartbeat to 1:2 exception, e: boom") == "heartbeat"
    assert operation_of_text("send message exception, topic: orders") == "send"
    assert operation_of_text("query topic raise exception, e") == "route query"
    assert operation_of_text("x read stream from endpoints 1:2 occurred AioRpcError") == (
        "telemetry stream"
    )
    assert operation_of_text("nothing known") == "other"


def test_summarise_puts_the_most_frequent_first() -> None:
    assert summarise({"DEADLINE_EXCEEDED": 2, "UNAVAILABLE": 10, "NONE": 0}) == (
        "UNAVAILABLE x10, DEADLINE_EXCEEDED x2"
    )
    assert summarise({"B": 1, "A": 1}) == "A x1, B x1"
    assert summarise({}) == ""


def test_capture_counts_the_client_logger_and_keeps_whole_lines() -> None:
    client = logging.getLogger(CLIENT_LOGGER)
    whole = f"send message exception, topic: orders, e: {_unavailable()}"
    with capture_client_errors() as tally:
        client.error(whole)
        client.error(
            "PRODUCER x failed to send message to 1:2, because of run out of attempt times"
        )
        client.warning(
            "PRODUCER x read stream from endpoints 1:2 occurred AioRpcError. "
            "code: StatusCode.UNAVAILABLE, message: Stream removed"
        )
        client.info("send heartbeat to 1:2 success.")
    client.error(whole)  # after the block: not counted
    assert dict(tally.counts) == {"send UNAVAILABLE": 1, "telemetry stream UNAVAILABLE": 1}
    assert dict(tally.levels) == {"error": 1, "warning": 1}
    assert tally.examples["send UNAVAILABLE"] == whole  # whole, not cut
    assert tally.log_file and tally.log_file.endswith("rocketmq_client.log")
    report = tally.report()
    assert report["total"] == 2 and report["callbackTracebacksHidden"] == 0


def _failed_heartbeat(exc: BaseException) -> None:
    """What the client does when a heartbeat fails: its real callback logs the error
    and re-raises it inside a future's done-callback."""
    callback = functools.partial(
        Client._Client__heartbeat_callback,
        "PRODUCER test-client",
        endpoints="127.0.0.1:1",
    )
    future: Future[object] = Future()
    future.add_done_callback(callback)
    future.set_exception(exc)


def _callback_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "concurrent.futures"]


def test_capture_keeps_the_heartbeat_callback_traceback_off_the_terminal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Without a capture the traceback reaches the handlers (the terminal, in rocketctl).
    _failed_heartbeat(_unavailable())
    assert len(_callback_records(caplog)) == 1
    caplog.clear()
    with capture_client_errors() as tally:
        _failed_heartbeat(_unavailable())
    assert _callback_records(caplog) == []
    assert dict(tally.counts) == {"heartbeat UNAVAILABLE": 1}  # counted once, by the client
    assert tally.tracebacks_hidden == 1
    # after the block the filter is gone again
    _failed_heartbeat(_unavailable())
    assert len(_callback_records(caplog)) == 1


def test_capture_lets_other_tracebacks_through(caplog: pytest.LogCaptureFixture) -> None:
    def mine(_: Future[object]) -> None:
        raise RuntimeError("a bug of ours, not client noise")

    with capture_client_errors() as tally:
        future: Future[object] = Future()
        future.add_done_callback(mine)
        future.set_result(None)
    [record] = _callback_records(caplog)
    assert record.exc_info and "a bug of ours" in str(record.exc_info[1])
    assert tally.total == 0 and tally.tracebacks_hidden == 0
