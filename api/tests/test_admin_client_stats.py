"""AdminClient's stats-topic methods against a scripted broker (httpx MockTransport):
paging, the stop offset, and snapshots of a format this client cannot read."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rocketcluster.api.client.admin import AdminClient, AdminError
from rocketcluster.api.stats import StatsFormatError


def _snapshot(offset: int, version: int = 1) -> dict[str, Any]:
    body = {"v": version, "time": 1000 + offset, "cluster": "c", "brokerGroup": "g", "brokerId": 0}
    return {"offset": offset, "storeTime": 2000 + offset, "snapshot": body}


class Broker:
    """Serves offsets [3, 10) of the stats topic, ``page`` at most per answer."""

    def __init__(self, page: int = 4, version: int = 1) -> None:
        self.page = page
        self.version = version
        self.asked: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.asked.append(params)
        if request.url.path == "/v1/stats/offset":
            return httpx.Response(200, json={"offset": 7, "minOffset": 3, "maxOffset": 10})
        limit = int(params["limit"])
        if limit > 1000:
            return httpx.Response(422, json={"detail": "limit: at most 1000"})
        start = max(3, int(params["fromOffset"]))
        end = min(10, start + min(limit, self.page))
        return httpx.Response(
            200,
            json={
                "minOffset": 3,
                "maxOffset": 10,
                "nextOffset": max(end, start),
                "snapshots": [_snapshot(o, self.version) for o in range(start, end)],
                "skipped": 0,
            },
        )


def _client(broker: Broker) -> AdminClient:
    client = AdminClient("127.0.0.1:1")
    client._http = httpx.Client(base_url=client.base, transport=httpx.MockTransport(broker))
    return client


def test_a_page_is_typed() -> None:
    with _client(Broker()) as client:
        page = client.stats_snapshots(0, 2)
    assert (page.min_offset, page.max_offset, page.next_offset, page.skipped) == (3, 10, 5, 0)
    assert [(s.offset, s.store_time, s.snapshot.time) for s in page.snapshots] == [
        (3, 2003, 1003),
        (4, 2004, 1004),
    ]
    assert page.snapshots[0].snapshot.broker_group == "g"


def test_iterating_follows_next_offset_and_stops_where_asked() -> None:
    broker = Broker(page=3)
    with _client(broker) as client:
        assert [s.offset for s in client.iter_stats_snapshots(0, page_size=100)] == list(
            range(3, 10)
        )
        assert [s.offset for s in client.iter_stats_snapshots(4, until_offset=8)] == [4, 5, 6, 7]
    assert all(int(a["limit"]) <= 100 for a in broker.asked)


def test_the_offset_of_a_time() -> None:
    broker = Broker()
    with _client(broker) as client:
        assert client.stats_offset(123) == 7
    assert broker.asked[-1] == {"time": "123"}


def test_a_snapshot_of_another_format_is_refused_with_the_reason() -> None:
    with _client(Broker(version=2)) as client, pytest.raises(StatsFormatError, match="v2"):
        client.stats_snapshots(0, 1)


def test_a_refused_request_names_the_problem() -> None:
    with _client(Broker()) as client, pytest.raises(AdminError, match="at most 1000"):
        client.stats_snapshots(0, 5000)
