"""``rocketcluster-operator``: run the operator (kopf) until SIGTERM.

Watches the namespaces in ``WATCH_NAMESPACE`` (comma-separated), or every namespace
when it is empty. ``ROCKETCLUSTER_APPLY_MODE=merge`` is for API servers without
server-side apply (the e2e emulator); the default is server-side apply.

Several replicas may run: each first waits for the Lease (``leader.py``), and only
the one holding it starts kopf. One that loses the Lease stops kopf and exits 1 (its
container restarts as a candidate, as client-go's leaders do); on SIGTERM the leader
gives the Lease back so a standby takes over at once. ``ROCKETCLUSTER_LEADER_ELECT=
false`` runs kopf without an election (one replica only). The health endpoint
(``LIVENESS_ENDPOINT``) answers while waiting as well as while leading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import kopf
from aiohttp import web

from rocketcluster.operator import handlers
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import KubeConfigError, discover
from rocketcluster.operator.leader import LeaderElector, LeaseConfig

log = logging.getLogger("rocketcluster.operator")
LOST_LEADERSHIP_EXIT = 1


class _QuietTicks(logging.Filter):
    """kopf logs every successful timer run at INFO: one line per cluster every tick.
    Failures, retries and everything the reconciler itself says still pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.levelno <= logging.INFO
            and record.getMessage().startswith("Timer ")
            and record.getMessage().endswith(" succeeded.")
        )


class _NamesTheObject(logging.Formatter):
    """kopf's per-object lines ("Handler 'put_entry' succeeded.") say which object
    only in the record's ``k8s_ref``: the line names it, as ``[Kind namespace/name]``,
    so a log of thousands of objects tells them apart."""

    def format(self, record: logging.LogRecord) -> str:
        ref = getattr(record, "k8s_ref", None)
        if not isinstance(ref, dict):
            return super().format(record)
        where = "/".join(str(p) for p in (ref.get("namespace"), ref.get("name")) if p)
        record = copy.copy(record)
        record.msg = f"[{ref.get('kind') or 'object'} {where}] {record.msg}"
        return super().format(record)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the rocketcluster operator.")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--namespace",
        action="append",
        default=[n for n in os.environ.get("WATCH_NAMESPACE", "").split(",") if n],
        help="watch this namespace (repeatable); default: all",
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("LIVENESS_ENDPOINT"),
        help="e.g. http://0.0.0.0:8080/healthz",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper())
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_NamesTheObject("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_QuietTicks())
    assert handlers.reconcile_cluster  # the handlers register on import
    if os.environ.get("ROCKETCLUSTER_LEADER_ELECT", "true").lower() == "false":
        asyncio.run(
            kopf.operator(
                clusterwide=not args.namespace,
                namespaces=args.namespace,
                standalone=True,
                liveness_endpoint=args.liveness,
            )
        )
        return
    sys.exit(asyncio.run(run_elected(args.namespace, args.liveness)))


async def run_elected(namespaces: list[str], liveness: str | None) -> int:
    """Wait for the Lease, then run kopf while it is held: 0 after a SIGTERM, 1 when
    leadership was lost (the process must not go on acting)."""
    try:
        connection = discover()
    except KubeConfigError as exc:
        log.error("%s", exc)
        return 2
    client = KubeClient(connection)
    elector = LeaderElector(client, LeaseConfig.from_env(connection.namespace))
    kopf_task: asyncio.Task[None] | None = None

    def healthy() -> bool:
        if kopf_task is None:
            return True  # a candidate: waiting is its job
        return elector.leading() and not kopf_task.done()

    async with _health(liveness, healthy):
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        log.info(
            "candidate %s for the Lease %s/%s",
            elector.identity,
            elector.config.namespace,
            elector.config.name,
        )
        acquiring = asyncio.ensure_future(elector.acquire())
        stop_wait = asyncio.ensure_future(stopping.wait())
        await asyncio.wait([acquiring, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        if stopping.is_set():
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquiring
            await elector.release()  # when it won the Lease as the signal came
            await client.close()
            return 0
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)  # kopf installs its own
        lost = asyncio.Event()
        keeping = asyncio.ensure_future(elector.keep())
        keeping.add_done_callback(lambda _: lost.set())
        kopf_task = asyncio.ensure_future(
            kopf.operator(
                clusterwide=not namespaces,
                namespaces=namespaces,
                standalone=True,
                stop_flag=lost,
                memo=kopf.Memo(leadership=elector),
            )
        )
        try:
            await kopf_task
        finally:
            stop_wait.cancel()
            deposed = keeping.done() and not keeping.cancelled()
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping
            if not deposed:
                await elector.release()
            await client.close()
        if deposed:
            log.error("leadership lost: exiting so the container restarts as a candidate")
            return LOST_LEADERSHIP_EXIT
    return 0


@contextlib.asynccontextmanager
async def _health(endpoint: str | None, healthy: Callable[[], bool]) -> AsyncIterator[None]:
    """``GET /healthz`` on ``endpoint`` (e.g. http://0.0.0.0:8080/healthz): 200 while
    ``healthy()``, else 503."""
    if not endpoint:
        yield
        return
    where = urlsplit(endpoint)

    async def answer(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "stalled\n")

    app = web.Application()
    app.router.add_get(where.path or "/healthz", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, where.hostname or "0.0.0.0", where.port or 8080)
    await site.start()
    try:
        yield
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    main()
