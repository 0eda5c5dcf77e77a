"""The controller's admin API — the catalogue and its gRPC call, leadership transfer,
the groups' long poll — on a ControllerCore whose Raft node commits at once (every
status code and message, quickly); real members are in test_controller_processes.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from rocketcluster.api.catalogue import Catalogue
from rocketcluster.api.features import RELEASE, SUPPORTED, reported
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.controller.admin import create_controller_app
from rocketcluster.controller.core import ControllerCore, ReplicasMachine
from rocketcluster.controller.election import BrokerLiveInfo
from rocketcluster.controller.groups_watch import version_of
from rocketcluster.controller.raft.rawnode import PeerProgress
from rocketcluster.controller.service import ControllerServicer
from rocketcluster.controller.state import ControllerCode
from rocketcluster.ctl.testing import three_controller_members


class FakeNode:
    """Commits every proposal at once; leadership is what the test sets."""

    def __init__(self, machine: ReplicasMachine) -> None:
        self.machine = machine
        self.index = 0
        self.me = 1
        self.leader_id: int | None = 1
        self.follows_transfers = True
        self.progress = {
            1: PeerProgress(10, 11, "replicate"),
            2: PeerProgress(9, 10, "replicate"),
            3: PeerProgress(10, 11, "replicate"),
        }
        self.raw = SimpleNamespace(status=lambda: SimpleNamespace(progress=self.progress))

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.me

    async def propose(self, data: bytes, wait_s: float) -> Any:
        self.index += 1
        return self.machine.apply(self.index, data)

    def transfer_leadership(self, to: int) -> None:
        if self.follows_transfers:
            self.leader_id = to

    def status(self) -> dict[str, Any]:
        return {"id": self.me, "term": 1, "state": "leader" if self.is_leader else "follower"}


def make_core(tmp_path: Path) -> ControllerCore:
    return ControllerCore(three_controller_members(tmp_path), FakeNode)


def node(core: ControllerCore) -> FakeNode:
    assert isinstance(core.node, FakeNode)
    return core.node


async def register(core: ControllerCore, group: str, endpoint: str = "") -> None:
    applied = await core.apply_broker_id("t", group, 1, "10.1.0.1:10911", f"{group}-1")
    assert applied.ok, applied
    registered = await core.register_broker("t", group, 1, "10.1.0.1:10911", endpoint)
    assert registered.ok, registered


@pytest.fixture
def core(tmp_path: Path) -> ControllerCore:
    return make_core(tmp_path)


@pytest.fixture
async def http(core: ControllerCore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_controller_app(core))
    # The long-poll tests hold requests for seconds.
    async with httpx.AsyncClient(
        transport=transport, base_url="http://controller", timeout=30
    ) as client:
        yield client


async def catalogue(http: httpx.AsyncClient) -> Catalogue:
    answer = await http.get("/v1/catalogue")
    assert answer.status_code == 200, answer.text
    return Catalogue.model_validate(answer.json())


async def test_the_cluster_view_says_what_this_member_understands(
    http: httpx.AsyncClient,
) -> None:
    """``features`` and ``release`` beside what /v1/cluster always said (additive: the
    operator reads a member that reports no list as the previous release)."""
    answer = await http.get("/v1/cluster")
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["features"] == sorted(f.value for f in SUPPORTED)
    assert {"catalogue-batch", "topic-trace", "features"} <= set(view["features"])
    assert view["release"] == RELEASE
    assert view["self"] == 1 and view["leader"] == 1 and view["raft"]["state"] == "leader"
    assert reported(view) == SUPPORTED


async def test_topics_put_get_delete(http: httpx.AsyncClient) -> None:
    put = await http.put("/v1/topics/orders", json={"name": "orders", "queues": 4})
    assert put.status_code == 200, put.text
    assert put.json() == {
        "code": "SUCCESS",
        "message": "topic orders created",
        "version": 1,
        "spec": {"name": "orders", "queues": 4, "messageType": "NORMAL"},
    }
    topic = (await catalogue(http)).topic("orders")
    assert topic is not None and topic.queues == 4
    same = await http.put("/v1/topics/orders", json={"queues": 4})  # the name may be left out
    assert same.json()["changed"] is False and (await catalogue(http)).version == 1
    assert (await http.delete("/v1/topics/orders")).json()["message"] == "topic orders deleted"
    assert (await catalogue(http)).topics == [] and (await catalogue(http)).version == 2
    absent = await http.delete("/v1/topics/orders")
    assert absent.status_code == 404 and absent.json()["detail"] == (
        "no topic 'orders' in the catalogue"
    )


async def test_topic_names_with_percent_and_bar_travel_in_the_path(http: httpx.AsyncClient) -> None:
    assert (await http.put("/v1/topics/%25RETRY%25billing", json={})).status_code == 200
    assert (await catalogue(http)).topic("%RETRY%billing") is not None
    assert (await http.delete("/v1/topics/%25RETRY%25billing")).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "detail"),
    [
        ("orders", {"name": "other"}, 400, "the path names topic 'orders' but the body names"),
        ("bad name", {}, 422, "invalid topic: name: topic 'bad name': only letters"),
        ("orders", {"queues": 0}, 422, "queues: Input should be greater than or equal to 1"),
        ("orders", {"queues": 4096}, 422, "queues: Input should be less than or equal to 1024"),
        ("orders", {"messageType": "BULK"}, 422, "messageType: Input should be 'NORMAL'"),
        ("orders", {"partitions": 2}, 422, "partitions: unknown field (the fields are name,"),
        ("orders", [1, 2], 422, "invalid topic: the body must be a JSON object"),
    ],
)
async def test_bad_topics_get_a_message_not_a_500(
    http: httpx.AsyncClient, path: str, body: Any, status: int, detail: str
) -> None:
    answer = await http.put(f"/v1/topics/{path}", json=body)
    assert answer.status_code == status, answer.text
    assert detail in answer.json()["detail"]
    assert (await catalogue(http)).version == 0


async def test_a_batch_of_entries_is_put_at_once(http: httpx.AsyncClient) -> None:
    body = {
        "topics": [{"name": f"t{i}", "queues": 2} for i in range(300)],
        "consumerGroups": [{"name": "readers", "fifo": True}],
    }
    put = await http.post("/v1/catalogue/entries", json=body)
    assert put.status_code == 200, put.text
    assert put.json()["entries"] == 301 and put.json()["version"] == 1
    found = await catalogue(http)
    assert len(found.topics) == 300 and found.consumer_group("readers") is not None


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"topics": [{"name": f"t{i}"} for i in range(1001)]}, "at most 1000 entries"),
        (
            {"topics": [{"name": "t"}] * 600, "consumerGroups": [{"name": "g"}] * 401},
            "at most 1000 entries",
        ),
        ({"topics": [{"name": "ok"}, {"name": "bad name"}]}, "only letters, digits"),
        ({"topics": {"name": "t"}}, "topics: Input should be a valid list"),
        ({"routes": []}, "routes: unknown field"),
        ([], "Input should be a valid dictionary"),
    ],
)
async def test_a_bad_batch_is_refused_whole(
    http: httpx.AsyncClient, body: Any, detail: str
) -> None:
    answer = await http.post("/v1/catalogue/entries", json=body)
    assert answer.status_code == 422, answer.text
    assert detail in answer.json()["detail"]
    assert (await catalogue(http)).version == 0


async def test_consumer_groups_put_get_delete(http: httpx.AsyncClient) -> None:
    body = {"name": "billing", "fifo": True, "maxDeliveryAttempts": 5}
    assert (await http.put("/v1/consumer-groups/billing", json=body)).status_code == 200
    group = (await catalogue(http)).consumer_group("billing")
    assert group is not None and group.fifo and group.max_delivery_attempts == 5
    bad = await http.put("/v1/consumer-groups/billing", json={"maxDeliveryAttempts": 0})
    assert bad.status_code == 422
    assert bad.json()["detail"].startswith("invalid consumer group: maxDeliveryAttempts:")
    assert (await http.delete("/v1/consumer-groups/billing")).status_code == 200
    assert (await http.delete("/v1/consumer-groups/billing")).status_code == 404


async def test_group_writable(core: ControllerCore, http: httpx.AsyncClient) -> None:
    await register(core, "g0", "g0.svc:8081")
    drained = await http.put("/v1/groups/g0/writable", json={"writable": False})
    assert drained.status_code == 200
    assert drained.json()["message"] == "broker group g0 is read-only"
    assert (await catalogue(http)).groups["g0"].model_dump() == {
        "endpoint": "g0.svc:8081",
        "writable": False,
    }
    unknown = await http.put("/v1/groups/nope/writable", json={"writable": False})
    assert unknown.status_code == 404 and "no broker group 'nope'" in unknown.json()["detail"]
    for body in ({"writable": "no"}, {}, {"writable": True, "why": "x"}):
        bad = await http.put("/v1/groups/g0/writable", json=body)
        assert bad.status_code == 422 and bad.json()["detail"].startswith("invalid request: ")
    assert (await http.put("/v1/groups/g0/writable", json={"writable": True})).status_code == 200
    assert (await catalogue(http)).groups["g0"].writable


async def test_forget_group_is_refused_while_a_broker_is_alive(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    await register(core, "g0")
    core.liveness.heartbeat("g0", BrokerLiveInfo(1), "10.1.0.1:10911", 60_000)
    refused = await http.delete("/v1/groups/g0")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("broker(s) 1 of group g0 are still alive")
    core.liveness.channel_opened("g0", 1)
    core.liveness.channel_closed("g0", 1)  # its channel broke: dead at once
    assert (await http.delete("/v1/groups/g0")).json()["message"] == "broker group g0 forgotten"
    assert (await catalogue(http)).groups == {}
    assert (await http.get("/v1/groups/g0")).status_code == 404
    assert (await http.delete("/v1/groups/g0")).status_code == 404


async def test_followers_send_every_write_to_the_leader(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    await register(core, "g0")
    node(core).leader_id = 2
    writes = [
        ("PUT", "/v1/topics/orders", {"queues": 4}),
        ("PUT", "/v1/topics/bad name", {}),  # not judged here either
        ("DELETE", "/v1/topics/orders", None),
        ("PUT", "/v1/consumer-groups/billing", {}),
        ("DELETE", "/v1/consumer-groups/billing", None),
        ("PUT", "/v1/groups/g0/writable", {"writable": False}),
        ("DELETE", "/v1/groups/g0", None),
        ("POST", "/v1/raft/transfer-leadership", {"to": None}),
    ]
    for method, path, body in writes:
        answer = await http.request(method, path, json=body)
        assert answer.status_code == 421, (method, path, answer.text)
        assert answer.json()["detail"] == {
            "error": "not the leader",
            "leader": "10.0.0.2:9878",
            "leaderAdmin": "10.0.0.2:8080",
        }
    assert (await catalogue(http)).groups.keys() == {"g0"}  # reads answer anywhere


async def test_transfer_leadership(core: ControllerCore, http: httpx.AsyncClient) -> None:
    async def transfer(body: Any = None) -> httpx.Response:
        node(core).leader_id = 1  # member 1 leads again before each request
        return await http.post("/v1/raft/transfer-leadership", json=body)

    moved = await transfer({"to": 2})
    assert moved.status_code == 200, moved.text
    assert moved.json() == {
        "code": "SUCCESS",
        "message": "member 2 leads now (was member 1)",
        "leader": 2,
        "previous": 1,
        "leaderAdmin": "10.0.0.2:8080",
    }
    # null, {} or no body: the most caught-up follower (3 has matched more than 2).
    for body in ({"to": None}, {}, None):
        assert (await transfer(body)).json()["leader"] == 3
    node(core).progress[2] = PeerProgress(12, 13, "replicate")
    node(core).progress[3] = PeerProgress(12, 13, "probe")  # unreachable lately
    assert (await transfer({})).json()["leader"] == 2
    stay = await transfer({"to": 1})
    assert stay.status_code == 200 and stay.json()["message"] == "member 1 leads already"
    unknown = await transfer({"to": 7})
    assert unknown.status_code == 400
    assert unknown.json()["detail"] == (
        "member 7 is not a controller member (the members are [1, 2, 3])"
    )
    bad = await transfer({"to": "two"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("invalid request: to:")


async def test_transfer_leadership_that_does_not_happen(core: ControllerCore) -> None:
    node(core).follows_transfers = False
    reply = await core.transfer_leadership(2, wait_s=0.1)
    assert reply.code == ControllerCode.CONTROLLER_TRANSFER_TIMEOUT
    assert reply.message.startswith("member 2 did not take over within 0.1 s (member 1 still")


async def test_get_catalogue_over_grpc_answers_only_news(core: ControllerCore) -> None:
    servicer = ControllerServicer(core)

    async def ask(known: int) -> cpb.ControllerReply:
        request = cpb.GetCatalogueRequest(known_version=known)
        reply: cpb.ControllerReply = await servicer.GetCatalogue(request, None)
        return reply

    empty = await ask(0)
    assert (empty.code, empty.json) == ("SUCCESS", "")  # nothing yet: version 0 is current
    await register(core, "g0", "g0.svc:8081")
    await core.put_topic({"name": "orders"})
    full = await ask(0)
    found = Catalogue.model_validate(json.loads(full.json))
    assert found.version == 3 and found.topic("orders") is not None
    assert found.groups["g0"].endpoint == "g0.svc:8081"
    assert (await ask(found.version)).json == ""
    assert (await ask(found.version + 5)).json != ""  # not current either: the whole catalogue
    node(core).leader_id = 2
    refused = await ask(0)
    assert (refused.code, refused.leader) == ("CONTROLLER_NOT_LEADER", "10.0.0.2:9878")


# -- GET /v1/watch/groups: the long poll the group endpoints follow masters with ----


async def watch(http: httpx.AsyncClient, known: str, wait: float) -> httpx.Response:
    return await http.get("/v1/watch/groups", params={"known": known, "wait": wait})


async def test_an_old_version_is_answered_at_once(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    await register(core, "g1")
    started = time.monotonic()
    answer = await watch(http, "", 20)
    assert time.monotonic() - started < 10
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [g["group"] for g in body["groups"]] == ["g1"]
    assert body["groups"] == (await http.get("/v1/groups")).json()
    assert body["version"] == version_of(body["groups"])


async def test_a_current_version_is_held_for_the_wait(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    await register(core, "g1")
    known = (await watch(http, "", 0)).json()["version"]
    started = time.monotonic()
    answer = await watch(http, known, 0.5)
    assert time.monotonic() - started >= 0.5
    assert answer.json()["version"] == known


async def held_poll(
    core: ControllerCore, http: httpx.AsyncClient
) -> tuple[str, asyncio.Task[httpx.Response]]:
    """Group g1 registered, and a long poll with its current version, held."""
    await register(core, "g1")
    known = (await watch(http, "", 0)).json()["version"]
    held = asyncio.create_task(watch(http, known, 25))
    await asyncio.sleep(0.2)
    assert not held.done()
    return known, held


async def test_a_change_releases_the_held_poll(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    known, held = await held_poll(core, http)
    started = time.monotonic()
    await register(core, "g2")
    answer = await asyncio.wait_for(held, 20)
    assert time.monotonic() - started < 20  # released by the change, not the wait
    body = answer.json()
    assert body["version"] != known
    assert [g["group"] for g in body["groups"]] == ["g1", "g2"]


async def test_only_the_leader_answers_and_losing_leadership_releases(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    _, held = await held_poll(core, http)
    node(core).leader_id = 2
    core.leadership_changed()
    answer = await asyncio.wait_for(held, 20)
    assert answer.status_code == 421
    assert answer.json()["detail"]["leaderAdmin"] == "10.0.0.2:8080"
    assert (await watch(http, "", 0)).status_code == 421


@pytest.mark.parametrize("wait", ["-1", "31", "soon"])
async def test_a_bad_wait_is_refused(http: httpx.AsyncClient, wait: str) -> None:
    answer = await http.get("/v1/watch/groups", params={"wait": wait})
    assert answer.status_code == 422, answer.text
    assert "wait" in answer.text
