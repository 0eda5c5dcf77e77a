"""The pod role label: the pure core (which label, what next, when to retry), the
labeller's coalescing and outage handling with a fake patcher, and the exact request
against a real HTTP server playing the API server."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from rocketcluster.api import kube
from rocketcluster.broker.kube_label import (
    HttpPodPatcher,
    LabelConfigError,
    LabelCore,
    LabelWriteError,
    PodLabeler,
    PodTarget,
    RetryPolicy,
    label_for,
)

FAST = RetryPolicy(first_s=0.01, max_s=0.05)


# -- the pure core ------------------------------------------------------------------


def test_labels_for_roles() -> None:
    for role in ("master", "slave", "no-master", "starting"):
        assert label_for(role) == role
    assert label_for("something-new") == "starting"


def test_the_core_starts_wanting_starting_and_the_latest_role_wins() -> None:
    core = LabelCore()
    assert core.pending() == "starting"
    core.want("slave")
    core.want("master")  # before anything was written: only the latest counts
    assert core.pending() == "master"
    assert core.succeeded("master") == 0
    assert core.pending() is None
    core.want("master")
    assert core.pending() is None  # no write for a role the pod already shows


def test_retries_back_off_and_an_outage_is_announced_once() -> None:
    core = LabelCore(RetryPolicy(first_s=0.2, max_s=1.0))
    outcomes = [core.failed() for _ in range(5)]
    assert [d for d, _ in outcomes] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert [began for _, began in outcomes] == [True, False, False, False, False]
    assert core.succeeded("starting") == 5
    assert core.failed() == (0.2, True)  # a new outage


def test_the_target_comes_from_the_pod_environment(tmp_path: Path) -> None:
    env = {
        kube.ENV_POD_NAME: "prod-broker-0-1",
        kube.ENV_POD_NAMESPACE: "ns",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    target = PodTarget.from_env(env)
    assert target.api_url == "https://10.96.0.1:443"
    assert target.serviceaccount_dir == Path(kube.SERVICEACCOUNT_DIR)
    assert target.path == "/api/v1/namespaces/ns/pods/prod-broker-0-1"
    v6 = PodTarget.from_env({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.api_url == "https://[fd00::1]:443"
    emulated = PodTarget.from_env(
        {
            **env,
            kube.ENV_KUBE_API_URL: "http://127.0.0.1:6443/",
            kube.ENV_SERVICEACCOUNT_DIR: str(tmp_path),
        }
    )
    assert emulated.api_url == "http://127.0.0.1:6443"
    assert emulated.serviceaccount_dir == tmp_path
    with pytest.raises(LabelConfigError, match="POD_NAMESPACE"):
        PodTarget.from_env({kube.ENV_POD_NAME: "p"})


# -- the labeller, with a fake patcher ------------------------------------------------


class FakePatcher:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = 0  # fail this many calls
        self.gate = asyncio.Event()
        self.gate.set()

    async def patch_role(self, label: str) -> None:
        self.calls.append(label)
        await self.gate.wait()
        if self.fail:
            self.fail -= 1
            raise LabelWriteError("connection refused")

    async def close(self) -> None:
        pass


async def _until(probe: Callable[[], object]) -> None:
    async with asyncio.timeout(10):
        while not probe():  # noqa: ASYNC110 (polling state the code under test changes)
            await asyncio.sleep(0.005)


async def test_roles_changing_during_a_write_coalesce_to_the_latest() -> None:
    patcher = FakePatcher()
    labeler = PodLabeler(patcher, "pod ns/p", FAST)
    patcher.gate.clear()  # the first write ("starting") hangs
    labeler.start()
    try:
        await _until(lambda: patcher.calls == ["starting"])
        assert not labeler.labelled
        for role in ("slave", "no-master", "slave", "master"):
            labeler.set_role(role)  # returns at once: the role change never waits
        patcher.gate.set()
        await _until(lambda: labeler.core.written == "master")
        await asyncio.sleep(0.05)
        assert patcher.calls == ["starting", "master"]  # no queue of stale labels
        assert labeler.labelled
    finally:
        await labeler.stop()


async def test_an_unreachable_api_server_is_retried_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "rocketcluster.broker.kube_label")
    patcher = FakePatcher()
    patcher.fail = 6
    labeler = PodLabeler(patcher, "pod ns/p", FAST)
    labeler.start()
    try:
        await _until(lambda: len(patcher.calls) >= 3)
        labeler.set_role("master")  # during the outage: the retries write the latest
        await _until(lambda: labeler.core.written == "master")
    finally:
        await labeler.stop()
    assert patcher.calls[-1] == "master" and len(patcher.calls) == 7
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "connection refused" in warnings[0].getMessage()
    assert any("after 6 failed attempts" in m for m in caplog.messages)


# -- the exact request, against a real HTTP server ------------------------------------


class FakeApiServer:
    """Records every PATCH of a pod; answers like the API server (or fails on demand)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, object]] = []
        self.failing = False
        self.labels: dict[str, str] = {kube.LABEL_ROLE: "master"}  # stale, from before

    async def patch(self, request: web.Request) -> web.Response:
        if self.failing:
            return web.json_response({"kind": "Status", "code": 503}, status=503)
        body = await request.read()
        self.requests.append(
            {
                "path": request.path,
                "contentType": request.headers.get("Content-Type"),
                "authorization": request.headers.get("Authorization"),
                "body": json.loads(body),
            }
        )
        self.labels.update(json.loads(body)["metadata"]["labels"])
        return web.json_response({"metadata": {"labels": self.labels}})


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[FakeApiServer, str]]:
    fake = FakeApiServer()
    app = web.Application()
    app.router.add_patch("/api/v1/namespaces/{ns}/pods/{name}", fake.patch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_label_follows_a_failover_with_the_exact_request(
    api_server: tuple[FakeApiServer, str], tmp_path: Path
) -> None:
    fake, url = api_server
    (tmp_path / "token").write_text("token-1\n")
    (tmp_path / "ca.crt").write_bytes(b"")  # as the emulator mounts it: no TLS here
    target = PodTarget.from_env(
        {
            kube.ENV_POD_NAME: "prod-broker-0-1",
            kube.ENV_POD_NAMESPACE: "prod-ns",
            kube.ENV_KUBE_API_URL: url,
            kube.ENV_SERVICEACCOUNT_DIR: str(tmp_path),
        }
    )
    labeler = PodLabeler(HttpPodPatcher(target), target.describe(), FAST)
    labeler.start()
    try:
        await _until(lambda: labeler.labelled)
        assert fake.labels[kube.LABEL_ROLE] == "starting"  # the stale "master" is gone
        labeler.set_role("slave")
        await _until(lambda: fake.labels[kube.LABEL_ROLE] == "slave")
        # the master dies: the group has no master for a moment, then this one wins
        (tmp_path / "token").write_text("token-2\n")  # rotated meanwhile
        labeler.set_role("no-master")
        await _until(lambda: labeler.core.written == "no-master")
        fake.failing = True  # the API server blips just as this broker is elected
        labeler.set_role("master")
        await asyncio.sleep(0.1)
        fake.failing = False
        await _until(lambda: fake.labels[kube.LABEL_ROLE] == "master")
    finally:
        await labeler.stop()
    first = fake.requests[0]
    assert first == {
        "path": "/api/v1/namespaces/prod-ns/pods/prod-broker-0-1",
        "contentType": "application/merge-patch+json",
        "authorization": "Bearer token-1",
        "body": {"metadata": {"labels": {"rocketcluster.io/role": "starting"}}},
    }
    assert [r["body"]["metadata"]["labels"][kube.LABEL_ROLE] for r in fake.requests] == [  # type: ignore[index]
        "starting",
        "slave",
        "no-master",
        "master",
    ]
    assert fake.requests[-1]["authorization"] == "Bearer token-2"
