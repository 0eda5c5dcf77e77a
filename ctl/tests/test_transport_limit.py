"""The transport limit of ``rocketctl bench clients``: the canned server's raw service,
run for real in its own process, and a short limit measurement against it."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rocketcluster.broker.canned import RAW_BATCH, RAW_STREAM
from rocketcluster.ctl.bench.client_bench import CannedServer, rows, transport_limit
from rocketcluster.ctl.local.addresses import CLAIMS_DIRECTORY


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


def _claimed_elsewhere(host: str) -> bool:
    """Whether another open claim (any descriptor, this process's included) holds
    ``host``'s lock file now."""
    path = CLAIMS_DIRECTORY / f"{host}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also drops the lock, when we got it
    return False


def test_a_starting_canned_server_holds_its_address_until_it_listens() -> None:
    """A local cluster starting in another test worker must not take the address of a
    canned server that has not bound it yet: the server's claim is held while its
    process starts, and the address is the one it then serves on."""
    candidates = [f"127.0.240.{y}" for y in range(1, 20)]
    seen: set[str] = set()
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(CannedServer)
        while not starting.done():
            seen.update(h for h in candidates if _claimed_elsewhere(h))
            time.sleep(0.002)
        server = starting.result()
    try:
        host = server.endpoint.rsplit(":", 1)[0]
        assert host in seen, f"{host} was never seen claimed while the server started"
        assert not _claimed_elsewhere(host)  # released once it listens
        with grpc.insecure_channel(server.endpoint) as channel:
            ack = channel.unary_unary(RAW_BATCH)(b"x" * 1024, timeout=10)
        assert ack == (1024).to_bytes(4, "big")
    finally:
        server.stop()
