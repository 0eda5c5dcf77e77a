"""``rocketcluster-operator``: run the operator (kopf) until SIGTERM.

Watches the namespaces in ``WATCH_NAMESPACE`` (comma-separated), or every namespace
when it is empty. ``ROCKETCLUSTER_APPLY_MODE=merge`` is for API servers without
server-side apply (the e2e emulator); the default is server-side apply.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import os

import kopf

from rocketcluster.operator import handlers


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
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            standalone=True,
            liveness_endpoint=args.liveness,
        )
    )


if __name__ == "__main__":
    main()
