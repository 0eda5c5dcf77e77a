"""What a call to the controllers' admin API takes — which member to ask, in what
order, when to ask again and what to say when nobody took it — written once, as plans
that the sync and the async client both run.

A plan is a generator: it yields the requests to make next (several at once: the
client sends them concurrently, so a paused or cut-off member costs one short timeout,
not one per member) or a pause, receives the answers, and returns the result or raises.
The clients only move bytes (``controller_admin.py``); every rule is here and in
``controller_leader.py``.

The leader rule, in calls: the leader found last is asked first and kept while it says
it still leads in a term no older than any seen; otherwise every member is asked
(``controller_leader.choose_leader``). A call the leader does not take — no answer, or
421 because leadership moved under it — goes to the leader found next, up to
``attempts`` times; a refusal (any other 4xx/5xx) is the answer and raises at once.
Writes are safe to repeat (the controllers say so: a 421 may follow a committed
command), so a write that got no answer is sent again too.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx

from rocketcluster.api.client.admin import segment
from rocketcluster.api.client.controller_leader import (
    Leader,
    MemberView,
    choose_leader,
    newest_term,
    why_no_leader,
)

T = TypeVar("T")

TIMEOUT_S: Final = 5.0
# /v1/cluster is answered from memory: a member that takes longer is paused, cut off
# or overloaded, and must not stall whoever looks for the leader.
PROBE_TIMEOUT_S: Final = 1.0
# A switchover or a leadership transfer answers once it happened.
ELECT_TIMEOUT_S: Final = 30.0
ATTEMPTS: Final = 3
RETRY_PAUSE_S: Final = 0.25
# The catalogue's collections (``PUT /v1/{collection}/{name}``).
CATALOGUE: Final = frozenset({"topics", "consumer-groups"})
MESSAGE_TEXT_LIMIT: Final = 500


class ControllerAdminError(RuntimeError):
    """A request the controllers refused (``status``: the HTTP status, ``detail``: the
    refusal's ``detail``) or that no member took (:class:`ControllerUnavailableError`).
    ``tried``: each member asked and what happened there."""

    def __init__(
        self, message: str, status: int = 0, detail: Any = None, tried: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.tried = tuple(tried)


class ControllerUnavailableError(ControllerAdminError):
    """No member took the request: no leader was found, or the leader found did not
    answer or handed the request on each time. ``status`` is 0, or the HTTP status
    every member refused the search with (401: the admin token is missing or wrong)."""


@dataclass(frozen=True)
class Ask:
    """One request to make: ``body`` is sent as JSON unless None."""

    address: str
    method: str
    path: str
    timeout: float
    params: Mapping[str, Any] | None = None
    body: Any = None


@dataclass(frozen=True)
class Answer:
    """What came back: ``status`` 0 and ``error`` when nothing did."""

    status: int
    body: Any = None
    text: str = ""
    error: str = ""

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        return cls(response.status_code, body, response.text)

    @classmethod
    def failed(cls, exc: httpx.HTTPError) -> Answer:
        # httpx's timeouts may carry no message of their own.
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return cls(0, error=f"no answer ({reason})")

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def detail(self) -> Any:
        """A refusal's ``detail`` (FastAPI's), else its text."""
        if isinstance(self.body, Mapping) and "detail" in self.body:
            return self.body["detail"]
        return self.text

    @property
    def detail_text(self) -> str:
        """The refusal's message when it is one line, else the whole body."""
        detail = self.detail
        text = detail if isinstance(detail, str) else self.text
        return text[:MESSAGE_TEXT_LIMIT]

    def outcome(self) -> str:
        """How it went, for an error message."""
        return self.error if self.status == 0 else f"{self.status} {self.detail_text}"


@dataclass(frozen=True)
class Pause:
    seconds: float


Step = tuple[Ask, ...] | Pause
Plan = Generator[Step, tuple[Answer, ...], T]


@dataclass(frozen=True)
class Reach:
    """How requests reach the members: the scheme of addresses given without one,
    the admin token (security.auth) and, for https to an address the certificate does
    not name (a pod IP), the name to check it for, sent as SNI."""

    scheme: str = "http"
    token: str | None = None
    server_name: str | None = None

    def url(self, address: str, path: str) -> str:
        base = address if "://" in address else f"{self.scheme}://{address}"
        return base.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def extensions(self) -> dict[str, Any] | None:
        return {"sni_hostname": self.server_name} if self.server_name else None


def refused(method: str, path: str, address: str, answer: Answer) -> ControllerAdminError:
    return ControllerAdminError(
        f"{method} {path} on {address}: {answer.status} {answer.detail_text}",
        answer.status,
        answer.detail,
        (f"{address}: {answer.outcome()}",),
    )


def _common_status(views: Sequence[MemberView]) -> int:
    """The HTTP status every member refused with, else 0."""
    statuses = {v.status for v in views}
    return statuses.pop() if len(statuses) == 1 and not any(v.answered for v in views) else 0


class ControllerCalls:
    """The plans, and what they remember between calls: the leader found last and the
    newest Raft term seen. ``addresses``: the members' admin addresses (``host:port``,
    or a URL), or member id -> address when the caller knows how to reach each member
    better than by the admin addresses the members are configured with."""

    def __init__(
        self,
        addresses: Sequence[str] | Mapping[int, str],
        *,
        timeout: float = TIMEOUT_S,
        probe_timeout: float = PROBE_TIMEOUT_S,
        attempts: int = ATTEMPTS,
        retry_pause: float = RETRY_PAUSE_S,
    ) -> None:
        if isinstance(addresses, Mapping):
            self.ids: dict[int, str] = dict(addresses)
            self.addresses = list(dict.fromkeys(addresses.values()))
        else:
            self.ids = {}
            self.addresses = list(dict.fromkeys(addresses))
        if not self.addresses:
            raise ValueError("no controller admin address given")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self._id_of = {address: member for member, address in self.ids.items()}
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self.attempts = attempts
        self.retry_pause = retry_pause
        self.remembered: str | None = None
        self.newest_term = 0

    # -- finding the leader ------------------------------------------------------

    def _ordered(self) -> list[str]:
        """Every member, the remembered leader first."""
        first = [self.remembered] if self.remembered else []
        return list(dict.fromkeys([*first, *self.addresses]))

    def _probe(self, address: str) -> Ask:
        return Ask(address, "GET", "/v1/cluster", self.probe_timeout)

    def _member(self, address: str, answer: Answer) -> MemberView:
        known = self._id_of.get(address)
        if answer.ok and isinstance(answer.body, Mapping):
            return MemberView(address, answer.body, known_id=known)
        error = "answered with no cluster view" if answer.ok else answer.outcome()
        return MemberView(address, None, error, known, answer.status)

    def views(self) -> Plan[list[MemberView]]:
        """Every member's ``/v1/cluster``, asked at once (``answered`` False, and the
        ``error``, for those that did not answer)."""
        addresses = self._ordered()
        answers = yield tuple(self._probe(a) for a in addresses)
        return [self._member(a, x) for a, x in zip(addresses, answers, strict=True)]

    def _remember(self, leader: Leader) -> Leader:
        self.remembered = leader.address
        self.newest_term = max(self.newest_term, leader.term)
        return leader

    def _discover(self, fresh: bool) -> Plan[Leader | list[MemberView]]:
        """The leader, or every member's view when none leads (one search, no retry)."""
        if not fresh and self.remembered is not None:
            (answer,) = yield (self._probe(self.remembered),)
            member = self._member(self.remembered, answer)
            if member.claims_leadership and member.term >= self.newest_term:
                return self._remember(Leader.of(member))
        views = yield from self.views()
        choice = choose_leader(views, self.ids)
        if choice.leader is None and choice.follow:
            answers = yield tuple(self._probe(a) for a in choice.follow)
            views += [self._member(a, x) for a, x in zip(choice.follow, answers, strict=True)]
            choice = choose_leader(views, self.ids)
        if any(v.answered for v in views):
            # What the members say now (a cluster started anew restarts its terms).
            self.newest_term = newest_term(views)
        if choice.leader is None:
            self.remembered = None
            return views
        return self._remember(choice.leader)

    def leader(self, fresh: bool = False) -> Plan[Leader]:
        """The leader by the rule; ``fresh``: ask every member even when the one found
        last still says it leads (what a cut-off old leader says until check-quorum
        retires it)."""
        views: list[MemberView] = []
        for attempt in range(self.attempts):
            if attempt:
                yield Pause(self.retry_pause)
            found = yield from self._discover(fresh)
            if isinstance(found, Leader):
                return found
            views = found
        raise ControllerUnavailableError(
            f"no controller leader: {why_no_leader(views)}",
            _common_status(views),
            tried=[v.describe(newest_term(views)) for v in views],
        )

    # -- calls -------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Plan[Any]:
        """``method path`` on the leader: its JSON answer (None when empty)."""
        tried: list[str] = []
        status = 0
        for attempt in range(self.attempts):
            found = yield from self._discover(fresh=False)
            if not isinstance(found, Leader):
                newest = newest_term(found)
                tried += [v.describe(newest) for v in found]
                status = _common_status(found)
                if attempt + 1 < self.attempts:
                    yield Pause(self.retry_pause)
                continue
            status = 0
            ask = Ask(found.address, method, path, timeout or self.timeout, params, body)
            (answer,) = yield (ask,)
            if answer.status == 421:
                tried.append(f"{found.address}: no longer the leader")
                self._handed_on(answer)
                continue
            if answer.status == 0:
                tried.append(f"{found.address}: {answer.error}")
                self.remembered = None
                continue
            if not answer.ok:
                raise refused(method, path, found.address, answer)
            return answer.body
        tried = list(dict.fromkeys(tried))
        raise ControllerUnavailableError(
            f"{method} {path}: no controller leader took it in {self.attempts} "
            f"attempt(s): {'; '.join(tried)}",
            status,
            tried=tried,
        )

    def _handed_on(self, answer: Answer) -> None:
        """A 421 names the leader's configured admin address: ask it first next time,
        unless the caller reaches members its own way (``ids``)."""
        detail = answer.detail
        hint = detail.get("leaderAdmin") if isinstance(detail, Mapping) else None
        self.remembered = hint if isinstance(hint, str) and hint and not self.ids else None

    def read_any(self, path: str, params: Mapping[str, Any] | None = None) -> Plan[Any]:
        """GET ``path`` on the first member that answers: every member serves the
        replicated state, so this reads without a leader (a quorum lost) — a follower
        perhaps a little behind. A refusal every member gives is raised as such."""
        tried: list[str] = []
        refusals: list[tuple[str, Answer]] = []
        for address in self._ordered():
            (answer,) = yield (Ask(address, "GET", path, self.timeout, params),)
            if answer.ok:
                return answer.body
            tried.append(f"{address}: {answer.outcome()}")
            refusals.append((address, answer))
        statuses = {a.status for _, a in refusals}
        if len(statuses) == 1 and 0 not in statuses:
            address, answer = refusals[0]
            error = refused("GET", path, address, answer)
            error.tried = tuple(tried)
            raise error
        raise ControllerUnavailableError(
            f"no controller answered GET {path}: {'; '.join(tried)}", tried=tried
        )

    # -- the API's operations ------------------------------------------------------

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, any_member: bool = False
    ) -> Plan[Any]:
        if any_member:
            return (yield from self.read_any(path, params))
        return (yield from self.call("GET", path, params=params))

    def cluster(self) -> Plan[dict[str, Any]]:
        leader = yield from self.leader()
        return dict(leader.view)

    def groups(self, any_member: bool) -> Plan[Any]:
        return self.get("/v1/groups", any_member=any_member)

    def watch_groups(self, known: str, wait_s: float) -> Plan[Any]:
        params = {"known": known, "wait": wait_s}
        return self.call("GET", "/v1/watch/groups", params=params, timeout=wait_s + self.timeout)

    def group(self, name: str, any_member: bool) -> Plan[Any]:
        return self.get(f"/v1/groups/{segment(name)}", any_member=any_member)

    def events(self, since: float, group: str | None, any_member: bool) -> Plan[Any]:
        params: dict[str, Any] = {"since": since}
        if group is not None:
            params["group"] = group
        return self.get("/v1/events", params, any_member)

    def catalogue(self, any_member: bool) -> Plan[Any]:
        return self.get("/v1/catalogue", any_member=any_member)

    def elect(self, group: str, broker_id: int | None, timeout: float) -> Plan[Any]:
        body = {} if broker_id is None else {"brokerId": broker_id}
        path = f"/v1/groups/{segment(group)}/elect"
        return self.call("POST", path, body=body, timeout=timeout)

    def transfer_leadership(self, to: int | None, timeout: float) -> Plan[Any]:
        path = "/v1/raft/transfer-leadership"
        return self.call("POST", path, body={"to": to}, timeout=timeout)

    def set_writable(self, group: str, writable: bool) -> Plan[Any]:
        path = f"/v1/groups/{segment(group)}/writable"
        return self.call("PUT", path, body={"writable": writable})

    def forget_group(self, group: str) -> Plan[Any]:
        return self.call("DELETE", f"/v1/groups/{segment(group)}")

    def put(self, collection: str, name: str, body: Mapping[str, Any]) -> Plan[Any]:
        return self.call("PUT", _entry(collection, name), body=dict(body))

    def put_entries(
        self, topics: Sequence[Mapping[str, Any]], groups: Sequence[Mapping[str, Any]]
    ) -> Plan[Any]:
        body = {"topics": [dict(t) for t in topics], "consumerGroups": [dict(g) for g in groups]}
        return self.call("POST", "/v1/catalogue/entries", body=body)

    def delete(self, collection: str, name: str) -> Plan[Any]:
        return self.call("DELETE", _entry(collection, name))


def _entry(collection: str, name: str) -> str:
    if collection not in CATALOGUE:
        raise ValueError(f"no catalogue collection {collection!r} (one of {sorted(CATALOGUE)})")
    return f"/v1/{collection}/{segment(name)}"
