"""``python -m rocketcluster.broker.main --config FILE``: run one broker process until
SIGTERM or SIGINT, then stop cleanly (flush, checkpoint, release the directory)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.broker.server import BrokerServer


async def serve(config: BrokerProcessConfig) -> int:
    server = BrokerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except Exception as exc:
        logging.getLogger("rocketcluster.broker").critical("broker failed to start: %s", exc)
        await server.stop()
        return 1
    print(f"READY {config.client_endpoint}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one rocketcluster broker.")
    parser.add_argument("--config", type=Path, required=True, help="BrokerProcessConfig JSON")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = BrokerProcessConfig.load(args.config)
    sys.exit(asyncio.run(serve(config)))


if __name__ == "__main__":
    main()
