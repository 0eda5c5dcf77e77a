"""``rocketcluster-operator``: run the operator (kopf) until SIGTERM.

Watches the namespaces in ``WATCH_NAMESPACE`` (comma-separated), or every namespace
when it is empty. ``ROCKETCLUSTER_APPLY_MODE=merge`` is for API servers without
server-side apply (the e2e emulator); the default is server-side apply.
"""

from __future__ import annotations

import argparse
import asyncio
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
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
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
