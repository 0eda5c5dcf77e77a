"""``python -m rocketcluster.broker.main --config FILE``: run one broker process until
SIGTERM or SIGINT, then stop cleanly (flush, checkpoint, release the directory)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.broker.collector import freeze_survivors, tune_collector
from rocketcluster.broker.event_loop import EVENT_LOOPS, loop_factory
from rocketcluster.broker.front.launch import LaunchedFront, discard, launch
from rocketcluster.broker.front.sizing import resolve

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EarlyStop:
    """A SIGTERM or SIGINT that comes before the event loop handles them (while this
    process imports the broker, its fronts already started): remembered, so the stop
    is as clean as one later — the fronts are ended, the exit status is 0 — instead
    of the default action killing the process and leaving its fronts to notice."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._request)

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


async def serve(
    config: BrokerProcessConfig,
    launched: list[LaunchedFront] | None = None,
    early: EarlyStop | None = None,
) -> int:
    """``launched``: the fronts, started before this process imported the broker;
    ``early``: whether a stop was asked for meanwhile."""
    from rocketcluster.broker.server import BrokerServer  # after the fronts started

    tune_collector()
    server = BrokerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    if early is not None and early.requested:
        logging.getLogger("rocketcluster.broker").info("stopped before it started")
        if launched:
            await asyncio.to_thread(discard, launched)
        return 0
    try:
        await server.start(abort=stop, launched=launched)
    except Exception as exc:
        if stop.is_set():  # SIGTERM while starting: a stop, not a failure
            logging.getLogger("rocketcluster.broker").info("stopped while starting: %s", exc)
            await server.stop()
            return 0
        logging.getLogger("rocketcluster.broker").critical("broker failed to start: %s", exc)
        await server.stop()
        return 1
    freeze_survivors()  # the recovered store and the servers, before any traffic
    print(f"READY {config.client_endpoint}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one rocketcluster broker.")
    parser.add_argument("--config", type=Path, required=True, help="BrokerProcessConfig JSON")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=os.environ.get("ROCKETCLUSTER_EVENT_LOOP", "uvloop"),
        help="uvloop (the default) or asyncio's own loop; the environment variable "
        "ROCKETCLUSTER_EVENT_LOOP sets the default",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = BrokerProcessConfig.load(args.config)
    early = EarlyStop()
    early.install()
    # The fronts import gRPC and the protocol while this process imports the broker,
    # recovers its store and takes its role (front/launch.py).
    launched = launch(resolve(config.front_processes))
    with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
        sys.exit(runner.run(serve(config, launched, early)))


if __name__ == "__main__":
    main()
