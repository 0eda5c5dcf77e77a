"""The canary process: a probe per broker group of the config file, the file watched
for changes, and ``/metrics``, ``/healthz`` and ``/readyz`` over plain HTTP.

The file is read again when its content changes (a ConfigMap update, a local
cluster's new group): groups that appear get a probe, groups that go lose theirs and
their series, groups whose settings changed get a new probe. A file that no longer
parses is reported and the last good config goes on.

``/healthz`` answers 200 while every probe loop runs (a loop that died of a bug
makes it 500, and Kubernetes restarts the pod); ``/readyz`` once a config is in
effect. Neither depends on the brokers' health: a canary whose probes fail is doing
its job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from rocketcluster.api.canary_config import CanaryConfig, CanaryConfigError, load_canary_config
from rocketcluster.ctl.canary.probe import CanaryMetrics, GroupProbe, ProbeTarget

log = logging.getLogger("rocketcluster.canary")

WATCH_S: Final = 1.0


def targets(config: CanaryConfig) -> dict[str, ProbeTarget]:
    """One probe target per group of ``config``."""
    creds = config.credentials
    return {
        g.name: ProbeTarget(
            cluster=config.cluster,
            group=g.name,
            endpoint=g.endpoint,
            topic=config.topic,
            consumer_group=config.consumer_group,
            interval_s=config.interval_seconds,
            timeout_s=config.timeout_seconds,
            ca_file=config.ca_file,
            access_key=creds.access_key if creds else None,
            secret_key_file=creds.secret_key_file if creds else None,
        )
        for g in config.groups
    }


class Canary:
    """The probes of one config; ``path`` is watched when given."""

    def __init__(
        self,
        config: CanaryConfig,
        path: Path | None = None,
        *,
        metrics: CanaryMetrics | None = None,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self.path = path
        self.metrics = metrics if metrics is not None else CanaryMetrics()
        self.echo = echo
        self.sender = f"{socket.gethostname()}-{os.getpid()}"
        self.probes: dict[str, tuple[GroupProbe, asyncio.Task[None]]] = {}
        self.applied = False
        self._digest = _digest(path) if path is not None else None

    def apply(self, config: CanaryConfig) -> None:
        """Start, restart and stop probes so they match ``config``."""
        wanted = targets(config)
        for group in list(self.probes):
            probe, task = self.probes[group]
            if wanted.get(group) != probe.target:
                task.cancel()
                del self.probes[group]
                if group not in wanted or probe.target.cluster != config.cluster:
                    self.metrics.remove_group(probe.target.cluster, group)
        for group, target in wanted.items():
            if group not in self.probes:
                probe = GroupProbe(target, self.metrics, sender=self.sender, echo=self.echo)
                task = asyncio.get_running_loop().create_task(probe.run(), name=f"canary {group}")
                self.probes[group] = (probe, task)
        self.config = config
        self.applied = True

    def healthy(self) -> tuple[bool, str]:
        dead = [g for g, (_, task) in self.probes.items() if task.done()]
        if dead:
            return False, f"probe loops ended: {', '.join(sorted(dead))}"
        return True, "ok"

    async def watch(self) -> None:
        """Re-read the file when its content changes, every WATCH_S."""
        if self.path is None:
            return
        while True:
            await asyncio.sleep(WATCH_S)
            digest = _digest(self.path)
            if digest is None or digest == self._digest:
                continue
            self._digest = digest
            try:
                config = load_canary_config(self.path)
            except CanaryConfigError as exc:
                self.echo(f"config not applied (the last good one goes on): {exc}")
                continue
            before = sorted(self.probes)
            self.apply(config)
            now = sorted(self.probes)
            was = f" (was {', '.join(before) or 'no group'})" if before != now else ""
            self.echo(f"config re-read: probing {', '.join(now) or 'no group'}{was}")

    async def run(self) -> None:
        """Apply the config and watch the file until cancelled; then stop every probe."""
        self.apply(self.config)
        try:
            await self.watch()
            await asyncio.Event().wait()  # no file to watch: run until cancelled
        finally:
            await self.stop()

    async def stop(self) -> None:
        tasks = [task for _, task in self.probes.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.probes.clear()


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def create_app(canary: Canary) -> Starlette:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(canary.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        ok, why = canary.healthy()
        return PlainTextResponse(why, status_code=200 if ok else 500)

    async def readyz(request: Request) -> Response:
        if not canary.applied:
            return PlainTextResponse("no config applied yet", status_code=503)
        return PlainTextResponse("ready")

    return Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )


async def serve(canary: Canary, host: str, port: int) -> None:
    """Probe and serve HTTP until SIGINT or SIGTERM (uvicorn's handlers)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(canary),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
    )
    probing = asyncio.get_running_loop().create_task(canary.run(), name="canary")
    try:
        await server.serve()
    finally:
        probing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probing
