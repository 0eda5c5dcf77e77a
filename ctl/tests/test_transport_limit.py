"""The transport limit of ``rocketctl bench clients``: the canned server's raw service,
run for real in its own process, and a short limit measurement against it."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from rocketcluster.broker.canned import RAW_BATCH, RAW_STREAM
from rocketcluster.ctl.bench.client_bench import CannedServer, rows, transport_limit


@pytest.fixture(scope="module")
def canned() -> Iterator[CannedServer]:
    server = CannedServer()
    try:
        yield server
    finally:
        server.stop()


def test_raw_stream_and_batch_answer_in_plain_bytes(canned: CannedServer) -> None:
    with grpc.insecure_channel(canned.endpoint) as channel:
        streamed = list(channel.unary_stream(RAW_STREAM)((37).to_bytes(4, "big"), timeout=10))
        assert len(streamed) == 37
        assert all(isinstance(m, bytes) and len(m) == 1024 for m in streamed)
        assert list(channel.unary_stream(RAW_STREAM)((0).to_bytes(4, "big"), timeout=10)) == []
        ack = channel.unary_unary(RAW_BATCH)(b"x" * 5 * 1024, timeout=10)
        assert ack == (5 * 1024).to_bytes(4, "big")


def test_transport_limit_reports_rates_and_cpu(canned: CannedServer) -> None:
    limit = transport_limit(canned.endpoint, 0.3, server_pid=canned.pid)
    assert set(limit) == {"raw_unary", "raw_stream"}
    for result in limit.values():
        assert result["errors"] == 0
        assert result["messages"] > 0 and result["messages"] % 32 == 0
        assert result["msgs_per_s"] > 0 and result["p99_ms"] >= result["p50_ms"] > 0
        assert result["server_cpu"] > 0 and result["client_cpu"] > 0
    table = rows({"transport_limit": limit, "ceiling": {}, "broker": {}})
    assert [r["case"] for r in table] == ["raw_unary", "raw_stream"]
    assert all("server_cpu" in r and "client_cpu" in r for r in table)
