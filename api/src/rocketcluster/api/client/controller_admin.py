"""ControllerAdmin and AsyncControllerAdmin: the controllers' admin HTTP API (the
``/v1/cluster``, ``/v1/groups``, ``/v1/events``, catalogue and Raft endpoints of
controller/admin.py) for every tool that talks to it — rocketctl, the local group
endpoints, the operator, the benchmarks, the chaos suite, the e2e timeline and the
Spark jobs.

One leader rule for all of them (controller_leader.py), one way to retry
(controller_requests.py), https with the cluster's CA and the admin token when the
cluster has security on, and names quoted as one path segment (RocketMQ names may hold
``%``: ``%RETRY%billing``). The two classes share every rule; they differ only in how
the bytes move (a thread per member while searching for the leader, or asyncio).

Reads (``groups``, ``group``, ``events``, ``catalogue``) ask the leader, so a caller
reads its own writes; ``any_member=True`` reads from the first member that answers,
which works without a quorum. Errors: :class:`ControllerAdminError` (a refusal, with
its HTTP status and detail) and :class:`ControllerUnavailableError` (nobody took the
request; ``tried`` says which members were asked and why each did not do).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx

from rocketcluster.api.client.controller_leader import Leader, MemberView
from rocketcluster.api.client.controller_requests import (
    ATTEMPTS,
    ELECT_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    RETRY_PAUSE_S,
    TIMEOUT_S,
    Answer,
    Ask,
    ControllerAdminError,
    ControllerCalls,
    ControllerUnavailableError,
    Pause,
    Plan,
    Reach,
)
from rocketcluster.api.tls import ClientTls, http_verify

__all__ = [
    "AsyncControllerAdmin",
    "ControllerAdmin",
    "ControllerAdminError",
    "ControllerUnavailableError",
    "Leader",
    "MemberView",
]

T = TypeVar("T")


def _setup(
    addresses: Sequence[str] | Mapping[int, str],
    tls: ClientTls | None,
    token: str | None,
    server_name: str | None,
    timeout: float,
    probe_timeout: float,
    attempts: int,
    retry_pause: float,
) -> tuple[ControllerCalls, Reach]:
    """What both clients build from their arguments (documented on ControllerAdmin)."""
    calls = ControllerCalls(
        addresses,
        timeout=timeout,
        probe_timeout=probe_timeout,
        attempts=attempts,
        retry_pause=retry_pause,
    )
    https = (
        tls is not None
        or server_name is not None
        or any(a.startswith("https://") for a in calls.addresses)
    )
    return calls, Reach("https" if https else "http", token, server_name)


class ControllerAdmin:
    """The controllers of one cluster, over ``httpx.Client``.

    ``addresses``: the members' admin addresses (``host:port``, or URLs), or member id
    -> address when the caller reaches members its own way (pod IPs) rather than at
    the admin addresses they are configured with. ``tls``: the cluster's CA (https);
    ``server_name``: https, the certificate checked for this name (sent as SNI) rather
    than for the address dialled; ``token``: the admin token (security.auth).
    ``timeout``: of a call; ``probe_timeout``: of each member's ``/v1/cluster`` while
    looking for the leader; ``attempts``: leaders tried per call, ``retry_pause``
    apart when none was found. ``http``: a client to use (not closed here); its
    ``verify`` must then trust the cluster's CA.

    Not for concurrent use from several threads (it remembers the leader it found)."""

    def __init__(
        self,
        addresses: Sequence[str] | Mapping[int, str],
        *,
        tls: ClientTls | None = None,
        token: str | None = None,
        server_name: str | None = None,
        timeout: float = TIMEOUT_S,
        probe_timeout: float = PROBE_TIMEOUT_S,
        attempts: int = ATTEMPTS,
        retry_pause: float = RETRY_PAUSE_S,
        http: httpx.Client | None = None,
    ) -> None:
        self._calls, self._reach = _setup(
            addresses, tls, token, server_name, timeout, probe_timeout, attempts, retry_pause
        )
        self._own_http = http is None
        self._http = http if http is not None else httpx.Client(verify=http_verify(tls))

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> ControllerAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def addresses(self) -> list[str]:
        return list(self._calls.addresses)

    # -- running plans -----------------------------------------------------------

    def _ask(self, ask: Ask) -> Answer:
        try:
            response = self._http.request(
                ask.method,
                self._reach.url(ask.address, ask.path),
                params=ask.params,
                json=ask.body,
                headers=self._reach.headers(),
                timeout=ask.timeout,
                extensions=self._reach.extensions(),
            )
        except httpx.HTTPError as exc:
            return Answer.failed(exc)
        return Answer.of(response)

    def _send(self, asks: tuple[Ask, ...]) -> tuple[Answer, ...]:
        if len(asks) == 1:
            return (self._ask(asks[0]),)
        # One thread per member: a paused one costs one timeout, not one each.
        try:
            with ThreadPoolExecutor(max_workers=len(asks)) as pool:
                return tuple(pool.map(self._ask, asks))
        except RuntimeError:  # the interpreter is shutting down: no new threads
            return tuple(self._ask(a) for a in asks)

    def _run(self, plan: Plan[T]) -> T:
        try:
            step = next(plan)
            while True:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                    step = plan.send(())
                else:
                    step = plan.send(self._send(step))
        except StopIteration as done:
            result: T = done.value
            return result

    # -- the API -------------------------------------------------------------------

    def views(self) -> list[MemberView]:
        """Every member's ``/v1/cluster`` as it answers (or why it did not)."""
        return self._run(self._calls.views())

    def leader(self, *, fresh: bool = False) -> Leader:
        """The leader by the rule (controller_leader.py); ``fresh``: ask every member
        even when the leader found last still says it leads."""
        return self._run(self._calls.leader(fresh))

    def cluster(self) -> dict[str, Any]:
        """The leader's ``/v1/cluster`` (brokers' liveness as the leader judges it)."""
        return self._run(self._calls.cluster())

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, any_member: bool = False
    ) -> Any:
        """GET any other read of the API (``path`` as given: quote names in it)."""
        return self._run(self._calls.get(path, params, any_member))

    def groups(self, *, any_member: bool = False) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._run(self._calls.groups(any_member))
        return found

    def group(self, name: str, *, any_member: bool = False) -> dict[str, Any]:
        """One broker group's view (a refusal with status 404 when there is none)."""
        found: dict[str, Any] = self._run(self._calls.group(name, any_member))
        return found

    def events(
        self, since: float = 0.0, group: str | None = None, *, any_member: bool = False
    ) -> list[dict[str, Any]]:
        """The history since ``since`` (seconds since the epoch), of ``group`` or all."""
        found: list[dict[str, Any]] = self._run(self._calls.events(since, group, any_member))
        return found

    def catalogue(self, *, any_member: bool = False) -> dict[str, Any]:
        found: dict[str, Any] = self._run(self._calls.catalogue(any_member))
        return found

    def elect(
        self, group: str, broker_id: int | None = None, *, timeout: float = ELECT_TIMEOUT_S
    ) -> dict[str, Any]:
        """Elect a master of ``group`` now; with ``broker_id``, that broker (switchover)."""
        found: dict[str, Any] = self._run(self._calls.elect(group, broker_id, timeout))
        return found

    def transfer_leadership(
        self, to: int | None = None, *, timeout: float = ELECT_TIMEOUT_S
    ) -> dict[str, Any]:
        """Hand Raft leadership to member ``to`` (None: the most caught-up follower)."""
        found: dict[str, Any] = self._run(self._calls.transfer_leadership(to, timeout))
        return found

    def set_writable(self, group: str, writable: bool) -> dict[str, Any]:
        found: dict[str, Any] = self._run(self._calls.set_writable(group, writable))
        return found

    def forget_group(self, group: str) -> dict[str, Any]:
        found: dict[str, Any] = self._run(self._calls.forget_group(group))
        return found

    def put(self, collection: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace catalogue entry ``name`` of ``collection`` (``topics`` or
        ``consumer-groups``): the answer carries the catalogue ``version``."""
        found: dict[str, Any] = self._run(self._calls.put(collection, name, body))
        return found

    def put_entries(
        self, topics: Sequence[Mapping[str, Any]], groups: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Create or replace up to MAX_BATCH_ENTRIES topics and consumer groups in one
        command: the answer carries the catalogue ``version`` and how many changed."""
        found: dict[str, Any] = self._run(self._calls.put_entries(topics, groups))
        return found

    def delete(self, collection: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self._run(self._calls.delete(collection, name))
        return found


class AsyncControllerAdmin:
    """:class:`ControllerAdmin` over ``httpx.AsyncClient``: the same arguments, the
    same methods, awaited. Not for concurrent calls from several tasks."""

    def __init__(
        self,
        addresses: Sequence[str] | Mapping[int, str],
        *,
        tls: ClientTls | None = None,
        token: str | None = None,
        server_name: str | None = None,
        timeout: float = TIMEOUT_S,
        probe_timeout: float = PROBE_TIMEOUT_S,
        attempts: int = ATTEMPTS,
        retry_pause: float = RETRY_PAUSE_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._calls, self._reach = _setup(
            addresses, tls, token, server_name, timeout, probe_timeout, attempts, retry_pause
        )
        self._own_http = http is None
        self._http = http if http is not None else httpx.AsyncClient(verify=http_verify(tls))

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncControllerAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def addresses(self) -> list[str]:
        return list(self._calls.addresses)

    async def _ask(self, ask: Ask) -> Answer:
        try:
            response = await self._http.request(
                ask.method,
                self._reach.url(ask.address, ask.path),
                params=ask.params,
                json=ask.body,
                headers=self._reach.headers(),
                timeout=ask.timeout,
                extensions=self._reach.extensions(),
            )
        except httpx.HTTPError as exc:
            return Answer.failed(exc)
        return Answer.of(response)

    async def _run(self, plan: Plan[T]) -> T:
        try:
            step = next(plan)
            while True:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                    step = plan.send(())
                else:
                    answers = await asyncio.gather(*(self._ask(a) for a in step))
                    step = plan.send(tuple(answers))
        except StopIteration as done:
            result: T = done.value
            return result

    async def views(self) -> list[MemberView]:
        return await self._run(self._calls.views())

    async def leader(self, *, fresh: bool = False) -> Leader:
        return await self._run(self._calls.leader(fresh))

    async def cluster(self) -> dict[str, Any]:
        return await self._run(self._calls.cluster())

    async def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, any_member: bool = False
    ) -> Any:
        return await self._run(self._calls.get(path, params, any_member))

    async def groups(self, *, any_member: bool = False) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._run(self._calls.groups(any_member))
        return found

    async def watch_groups(self, known: str, wait_s: float) -> dict[str, Any]:
        """The leader's group views as ``{"version", "groups"}``, once their version
        differs from ``known`` or after ``wait_s`` (a long poll: "" gets them at once)."""
        found: dict[str, Any] = await self._run(self._calls.watch_groups(known, wait_s))
        return found

    async def group(self, name: str, *, any_member: bool = False) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.group(name, any_member))
        return found

    async def events(
        self, since: float = 0.0, group: str | None = None, *, any_member: bool = False
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._run(self._calls.events(since, group, any_member))
        return found

    async def catalogue(self, *, any_member: bool = False) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.catalogue(any_member))
        return found

    async def elect(
        self,
        group: str,
        broker_id: int | None = None,
        *,
        timeout: float = ELECT_TIMEOUT_S,  # noqa: ASYNC109 (httpx's own timeout, per request)
    ) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.elect(group, broker_id, timeout))
        return found

    async def transfer_leadership(
        self,
        to: int | None = None,
        *,
        timeout: float = ELECT_TIMEOUT_S,  # noqa: ASYNC109 (httpx's own timeout, per request)
    ) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.transfer_leadership(to, timeout))
        return found

    async def set_writable(self, group: str, writable: bool) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.set_writable(group, writable))
        return found

    async def forget_group(self, group: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.forget_group(group))
        return found

    async def put(self, collection: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.put(collection, name, body))
        return found

    async def put_entries(
        self, topics: Sequence[Mapping[str, Any]], groups: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.put_entries(topics, groups))
        return found

    async def delete(self, collection: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._run(self._calls.delete(collection, name))
        return found
