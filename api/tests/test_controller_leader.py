"""The one leader rule (controller_leader.py) on views as members answer them, and the
client's handling of what comes back (controller_requests.py) over a mock transport:
which member is asked, in what order, and what an error says."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rocketcluster.api.client.controller_admin import (
    AsyncControllerAdmin,
    ControllerAdmin,
    ControllerAdminError,
    ControllerUnavailableError,
)
from rocketcluster.api.client.controller_leader import MemberView, choose_leader, why_no_leader


def view(me: int, leader: int | None, term: int, state: str = "follower") -> dict[str, Any]:
    return {
        "self": me,
        "leader": leader,
        "raft": {"state": state, "term": term},
        "members": [{"id": i, "adminAddress": f"c{i}:8080"} for i in (1, 2, 3)],
    }


def member(me: int, leader: int | None, term: int, state: str = "follower") -> MemberView:
    return MemberView(f"c{me}:8080", view(me, leader, term, state))


def test_the_leader_with_the_newest_term_wins_over_a_cut_off_old_one() -> None:
    old = member(1, 1, 4, "leader")  # cut off: still believes it leads
    new = member(2, 2, 5, "leader")
    choice = choose_leader([old, new, member(3, 2, 5)], {})
    assert choice.leader is not None and choice.leader.address == "c2:8080"
    assert choice.leader.term == 5 and choice.leader.member_id == 2


def test_an_old_leader_is_not_believed_once_a_newer_term_is_seen() -> None:
    """The new leader did not answer: nobody to use, rather than the stale one."""
    views = [
        member(1, 1, 4, "leader"),
        MemberView("c2:8080", error="no answer (ConnectTimeout)"),
        member(3, 2, 5),
    ]
    choice = choose_leader(views, {})
    assert choice.leader is None and choice.follow == ()  # c2 was asked already
    why = why_no_leader(views)
    assert "c1:8080: says it leads in term 4, but term 5 is newer" in why
    assert "c2:8080: no answer (ConnectTimeout)" in why
    assert "c3:8080: follower in term 5, names leader 2" in why


def test_a_leader_named_by_a_follower_and_not_asked_yet_is_followed() -> None:
    choice = choose_leader([member(1, 3, 7)], {})
    assert choice.leader is None and choice.follow == ("c3:8080",)
    # The caller's own map of member ids wins over the configured admin address.
    assert choose_leader([member(1, 3, 7)], {3: "10.0.0.3:8080"}).follow == ("10.0.0.3:8080",)


def test_a_view_without_raft_state_leads_when_it_names_itself() -> None:
    views = [MemberView("a", {"leader": 2}, known_id=1), MemberView("b", {"leader": 2}, known_id=2)]
    choice = choose_leader(views, {})
    assert choice.leader is not None and choice.leader.address == "b"


class Members:
    """Three members over a mock transport: ``leader`` leads in ``term``; ``down``
    answer nothing; every request is recorded as (host, raw path)."""

    def __init__(self) -> None:
        self.leader: int | None = 2
        self.term = 3
        self.tokens: set[str | None] = set()
        self.down: set[int] = set()
        self.seen: list[tuple[str, str]] = []
        self.refuse_writes_once = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        me = int(host.removeprefix("c"))
        self.seen.append((host, request.url.raw_path.decode()))
        self.tokens.add(request.headers.get("authorization"))
        if me in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/v1/cluster":
            state = "leader" if me == self.leader else "follower"
            return httpx.Response(200, json=view(me, self.leader, self.term, state))
        if request.method != "GET" and self.refuse_writes_once:
            self.refuse_writes_once = False  # leadership moves under this write
            self.leader = 1
        if request.method != "GET" and me != self.leader:  # writes on the leader only
            detail = {"error": "not the leader", "leaderAdmin": f"c{self.leader}:8080"}
            return httpx.Response(421, json={"detail": detail})
        if request.url.path == "/v1/events":
            return httpx.Response(200, json=[{"command": "ElectMaster"}])
        if request.url.path.startswith("/v1/groups/") and request.method == "GET":
            name = request.url.path.removeprefix("/v1/groups/")
            if name != "%RETRY%g%41":
                return httpx.Response(404, json={"detail": f"no broker group {name!r}"})
            return httpx.Response(200, json={"group": name, "masterId": 1})
        body = json.loads(request.content) if request.content else None
        return httpx.Response(200, json={"code": "SUCCESS", "body": body, "version": 9})

    def admin(self, **options: Any) -> ControllerAdmin:
        return ControllerAdmin(
            ["c1:8080", "c2:8080", "c3:8080"],
            http=httpx.Client(transport=httpx.MockTransport(self.handle)),
            retry_pause=0.0,
            **options,
        )


def test_names_travel_as_one_quoted_segment() -> None:
    members = Members()
    admin = members.admin()
    assert admin.group("%RETRY%g%41")["group"] == "%RETRY%g%41"
    admin.elect("%RETRY%g%41", 3)
    admin.put("topics", "%RETRY%x", {"name": "%RETRY%x"})
    paths = [p for host, p in members.seen if not p.endswith("/cluster")]
    assert paths == [
        "/v1/groups/%25RETRY%25g%2541",
        "/v1/groups/%25RETRY%25g%2541/elect",
        "/v1/topics/%25RETRY%25x",
    ]
    with pytest.raises(ValueError, match="no catalogue collection"):
        admin.put("groups/../topics", "x", {})


def test_the_leader_found_is_asked_first_and_kept_while_it_leads() -> None:
    members = Members()
    admin = members.admin()
    admin.groups()
    members.seen.clear()
    admin.groups()
    assert members.seen == [("c2", "/v1/cluster"), ("c2", "/v1/groups")]


def test_a_dead_leader_is_replaced_by_the_next_one() -> None:
    members = Members()
    admin = members.admin()
    admin.groups()
    members.down = {2}
    members.leader, members.term = 3, 4
    members.seen.clear()
    admin.groups()
    calls = [(h, p) for h, p in members.seen if p != "/v1/cluster"]
    assert calls == [("c3", "/v1/groups")]


def test_a_write_handed_on_with_421_follows_the_leader_it_names() -> None:
    members = Members()
    admin = members.admin()
    admin.groups()
    members.refuse_writes_once = True  # c2 answers 421 naming c1
    members.seen.clear()
    answer = admin.set_writable("g", False)
    assert answer["body"] == {"writable": False}
    assert members.seen == [
        ("c2", "/v1/cluster"),
        ("c2", "/v1/groups/g/writable"),
        ("c1", "/v1/cluster"),  # the leader the 421 named, asked first
        ("c1", "/v1/groups/g/writable"),
    ]


def test_a_refusal_raises_at_once_with_its_status_and_detail() -> None:
    admin = Members().admin()
    with pytest.raises(ControllerAdminError) as refused:
        admin.group("nope")
    assert refused.value.status == 404 and refused.value.detail == "no broker group 'nope'"
    assert "GET /v1/groups/nope on c2:8080: 404 no broker group 'nope'" in str(refused.value)
    assert not isinstance(refused.value, ControllerUnavailableError)


def test_no_leader_says_which_members_were_tried_and_why() -> None:
    members = Members()
    members.down = {1, 2, 3}
    admin = members.admin(attempts=2)
    with pytest.raises(ControllerUnavailableError) as none:
        admin.groups()
    error = none.value
    assert error.status == 0
    assert [t.split(":")[0] for t in error.tried] == ["c1", "c2", "c3"]  # each once
    assert "no answer (ConnectError: connection refused)" in str(error)
    assert "GET /v1/groups: no controller leader took it in 2 attempt(s)" in str(error)


def test_any_member_reads_need_no_leader() -> None:
    members = Members()
    members.leader = None  # an election: nobody leads
    members.down = {1}
    admin = members.admin(attempts=1)
    with pytest.raises(ControllerUnavailableError, match="c2:8080: follower in term 3"):
        admin.groups()
    members.seen.clear()
    assert admin.events(12.5, "g", any_member=True) == [{"command": "ElectMaster"}]
    assert members.seen == [
        ("c1", "/v1/events?since=12.5&group=g"),
        ("c2", "/v1/events?since=12.5&group=g"),
    ]


def test_a_refusal_by_every_member_keeps_its_status() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"detail": "this endpoint requires the admin token"})

    admin = ControllerAdmin(
        ["a:1", "b:1"], http=httpx.Client(transport=httpx.MockTransport(handle)), attempts=1
    )
    with pytest.raises(ControllerUnavailableError) as none:
        admin.leader()
    assert none.value.status == 401 and "requires the admin token" in str(none.value)
    with pytest.raises(ControllerAdminError) as refused:
        admin.events(any_member=True)
    assert refused.value.status == 401


async def test_the_async_client_follows_the_same_rule() -> None:
    members = Members()
    transport = httpx.MockTransport(members.handle)
    async with AsyncControllerAdmin(
        {1: "c1:8080", 2: "c2:8080", 3: "c3:8080"},
        http=httpx.AsyncClient(transport=transport),
        token="secret",
    ) as admin:
        leader = await admin.leader()
        assert (leader.member_id, leader.address, leader.term) == (2, "c2:8080", 3)
        assert (await admin.group("%RETRY%g%41"))["masterId"] == 1
        views = await admin.views()
        assert [v.member_id for v in views] == [2, 1, 3]  # the leader found first
    assert members.tokens == {"Bearer secret"}
