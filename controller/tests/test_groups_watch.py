"""GET /v1/watch/groups: the long poll the group endpoints follow masters with,
answered at once when the caller's version is old, held while it is current, released
by a change or by this member's leadership ending (on a ControllerCore whose Raft node
commits at once; the proxy following real members is in e2e/local)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from rocketcluster.controller.admin import create_controller_app
from rocketcluster.controller.core import ControllerCore
from rocketcluster.controller.groups_watch import version_of

from .fake_core import make_core, node, register


@pytest.fixture
def core(tmp_path: Path) -> ControllerCore:
    return make_core(tmp_path)


@pytest.fixture
async def http(core: ControllerCore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_controller_app(core))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://controller", timeout=30
    ) as client:
        yield client


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


async def test_a_change_releases_the_held_poll(
    core: ControllerCore, http: httpx.AsyncClient
) -> None:
    await register(core, "g1")
    known = (await watch(http, "", 0)).json()["version"]
    held = asyncio.create_task(watch(http, known, 25))
    await asyncio.sleep(0.2)
    assert not held.done()
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
    await register(core, "g1")
    known = (await watch(http, "", 0)).json()["version"]
    held = asyncio.create_task(watch(http, known, 25))
    await asyncio.sleep(0.2)
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
