"""``python -m rocketcluster.controller.main --config FILE``: run one controller member."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.controller.server import ControllerServer


async def serve(config: ControllerProcessConfig) -> int:
    server = ControllerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except Exception as exc:
        logging.getLogger("rocketcluster.controller").critical(
            "controller failed to start: %s", exc
        )
        await server.stop()
        return 1
    print(f"READY controller {config.node_id}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one rocketcluster controller member.")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.exit(asyncio.run(serve(ControllerProcessConfig.load(args.config))))


if __name__ == "__main__":
    main()
