"""PodLabeler: a broker keeps its own pod's role label current, as Patroni does.

The group's client Service selects the pod labelled ``rocketcluster.io/role=master``,
so the label must follow the broker's role at once. At start the broker labels itself
``starting`` (a restarted former master still carries ``master`` from its previous
life, and must not be selected for it) and is not ready until that write landed; then
every role change is written, latest wins: while a write is in flight or failing, newer
roles replace the one waiting, so the API server never receives a queue of stale
labels. Failures are retried with capped exponential backoff and logged once per
outage; they never delay or fail the role change itself.

A pure core (:class:`LabelCore`: which label for which role, what to write next, when
to try again) and a thin httpx shell (:class:`HttpPodPatcher`: one JSON merge patch of
the pod, with the service account's token read afresh for every call, as it rotates).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import httpx

from rocketcluster.api import kube

log = logging.getLogger(__name__)

STARTING: Final = "starting"
ROLE_LABELS: Final = frozenset({kube.ROLE_MASTER, "slave", "no-master", STARTING})
MERGE_PATCH: Final = "application/merge-patch+json"
TIMEOUT_S: Final = 5.0


def label_for(role: str) -> str:
    """The label value for a broker role (an unknown role is not yet a role)."""
    return role if role in ROLE_LABELS else STARTING


@dataclass(frozen=True)
class RetryPolicy:
    first_s: float = 0.2
    max_s: float = 5.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row."""
        return float(min(self.max_s, self.first_s * 2 ** max(0, failures - 1)))


class LabelCore:
    """What the pod should say, what the API server holds, and when to try again."""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        self.policy = policy or RetryPolicy()
        self.wanted = STARTING
        self.written: str | None = None  # None until the first write after start landed
        self.failures = 0

    def want(self, role: str) -> None:
        self.wanted = label_for(role)

    def pending(self) -> str | None:
        """The label to write now, or None when the pod says what it should."""
        return None if self.written == self.wanted else self.wanted

    def succeeded(self, label: str) -> int:
        """``label`` landed; returns how many failures in a row it ended."""
        ended, self.failures = self.failures, 0
        self.written = label
        return ended

    def failed(self) -> tuple[float, bool]:
        """A write failed: the delay before the next, and whether an outage began
        (log then, not on every retry)."""
        self.failures += 1
        return self.policy.delay(self.failures), self.failures == 1


class LabelWriteError(RuntimeError):
    pass


class LabelConfigError(RuntimeError):
    pass


class PodPatcher(Protocol):
    async def patch_role(self, label: str) -> None:
        """Write ``label`` on the pod, or raise :class:`LabelWriteError`."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class PodTarget:
    """Which pod to label, on which API server, as which service account."""

    api_url: str
    namespace: str
    name: str
    serviceaccount_dir: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PodTarget:
        name, namespace = env.get(kube.ENV_POD_NAME), env.get(kube.ENV_POD_NAMESPACE)
        if not name or not namespace:
            raise LabelConfigError(
                f"labelPodRole is set but {kube.ENV_POD_NAME} / {kube.ENV_POD_NAMESPACE} are "
                "not in the environment: give the container them from the downward API "
                "(metadata.name, metadata.namespace)"
            )
        url = env.get(kube.ENV_KUBE_API_URL)
        if not url:
            host = env.get("KUBERNETES_SERVICE_HOST")
            if not host:
                raise LabelConfigError(
                    f"labelPodRole is set but neither {kube.ENV_KUBE_API_URL} nor "
                    "KUBERNETES_SERVICE_HOST says where the API server is"
                )
            port = env.get("KUBERNETES_SERVICE_PORT", "443")
            url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        directory = Path(env.get(kube.ENV_SERVICEACCOUNT_DIR) or kube.SERVICEACCOUNT_DIR)
        return cls(url.rstrip("/"), namespace, name, directory)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def describe(self) -> str:
        return f"pod {self.namespace}/{self.name}"


def role_patch(label: str) -> dict[str, object]:
    return {"metadata": {"labels": {kube.LABEL_ROLE: label}}}


class HttpPodPatcher:
    """One JSON merge patch per write, with the token read afresh each time."""

    def __init__(self, target: PodTarget, *, timeout: float = TIMEOUT_S) -> None:
        self.target = target
        ca = target.serviceaccount_dir / "ca.crt"
        verify: ssl.SSLContext | bool = True
        if ca.is_file() and ca.stat().st_size > 0:
            verify = ssl.create_default_context(cafile=str(ca))
        self._http = httpx.AsyncClient(base_url=target.api_url, verify=verify, timeout=timeout)

    def _token(self) -> str:
        try:
            return (self.target.serviceaccount_dir / "token").read_text().strip()
        except OSError as exc:
            raise LabelWriteError(f"no service account token: {exc}") from exc

    async def patch_role(self, label: str) -> None:
        headers = {"Content-Type": MERGE_PATCH, "Authorization": f"Bearer {self._token()}"}
        try:
            response = await self._http.patch(
                self.target.path, content=json.dumps(role_patch(label)), headers=headers
            )
        except httpx.HTTPError as exc:
            raise LabelWriteError(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise LabelWriteError(f"HTTP {response.status_code}: {response.text[:200]}")

    async def close(self) -> None:
        await self._http.aclose()


class PodLabeler:
    """Drives :class:`LabelCore` with one task; :meth:`set_role` never waits."""

    def __init__(self, patcher: PodPatcher, what: str, policy: RetryPolicy | None = None) -> None:
        self._patcher = patcher
        self._what = what
        self.core = LabelCore(policy)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def labelled(self) -> bool:
        """True once a write after start landed (the stale label is gone)."""
        return self.core.written is not None

    def start(self) -> None:
        self._wake.set()  # write "starting" first
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pod-labeler")

    def set_role(self, role: str) -> None:
        self.core.want(role)
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._patcher.close()

    async def _run(self) -> None:
        core = self.core
        while True:
            await self._wake.wait()
            self._wake.clear()
            while (label := core.pending()) is not None:
                try:
                    await self._patcher.patch_role(label)
                except LabelWriteError as exc:
                    delay, began = core.failed()
                    if began:
                        log.warning(
                            "labelling %s role=%s failed (%s); retrying with backoff, "
                            "the latest role wins",
                            self._what,
                            label,
                            exc,
                        )
                    await asyncio.sleep(delay)
                    continue
                ended = core.succeeded(label)
                if ended:
                    log.info(
                        "%s labelled role=%s after %d failed attempts", self._what, label, ended
                    )
                else:
                    log.info("%s labelled role=%s", self._what, label)
