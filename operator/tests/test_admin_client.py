"""The operator's client of the controllers' admin API at the request level: writes go
to the leader (found through any member, followed once on 421), and names travel as
one path segment even when RocketMQ allows ``%`` in them."""

from __future__ import annotations

import json

import httpx

from rocketcluster.operator.admin import AdminError, ControllerAdmin


def _admin(handler: httpx.MockTransport) -> ControllerAdmin:
    return ControllerAdmin(httpx.AsyncClient(transport=handler), {1: "10.0.0.1", 2: "10.0.0.2"})


async def test_writes_go_to_the_leader_with_names_quoted() -> None:
    seen: list[tuple[str, str, str]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.host, request.url.raw_path.decode()))
        if request.url.path == "/v1/cluster":
            return httpx.Response(200, json={"leader": 2})
        return httpx.Response(200, json={"code": "SUCCESS", "version": 7})

    admin = _admin(httpx.MockTransport(handle))
    # the answer's catalogue version: what brokers must have applied to serve the entry
    assert await admin.put("topics", "%RETRY%billing", {"name": "%RETRY%billing"}) == 7
    await admin.set_writable("prod-broker-2", False)
    writes = [s for s in seen if s[0] != "GET"]
    assert writes == [
        ("PUT", "10.0.0.2", "/v1/topics/%25RETRY%25billing"),
        ("PUT", "10.0.0.2", "/v1/groups/prod-broker-2/writable"),
    ]


async def test_a_moved_leader_is_followed_once_and_refusals_carry_their_detail() -> None:
    leader = {"id": 1}
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/cluster":
            return httpx.Response(200, json={"leader": leader["id"]})
        calls.append(request.url.host)
        if request.url.host == "10.0.0.1":
            leader["id"] = 2  # leadership moved under the call
            return httpx.Response(421, json={"detail": {"error": "not the leader"}})
        body = json.loads(request.content)
        if body.get("queues", 1) > 1024:
            return httpx.Response(422, json={"detail": "queues: at most 1024"})
        return httpx.Response(200, json={})

    admin = _admin(httpx.MockTransport(handle))
    await admin.put("topics", "orders", {"name": "orders", "queues": 8})
    assert calls == ["10.0.0.1", "10.0.0.2"]
    try:
        await admin.put("topics", "orders", {"name": "orders", "queues": 5000})
    except AdminError as exc:
        assert exc.status == 422 and exc.detail == "queues: at most 1024"
    else:
        raise AssertionError("a refused write must raise")
