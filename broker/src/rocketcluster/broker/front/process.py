"""``python -m rocketcluster.broker.front --channel-fd N --index I``: one front process.

Started by its store process (``supervisor.py``) with one end of a socket pair; reads
its configuration from the first frame, serves the client port beside the other fronts
(``SO_REUSEPORT``), says HELLO, and from then on relays every admitted call. It exits
at once when the store process goes (the channel closes: a killed store process ends
its fronts, whose clients reconnect to the restarted pod), and on SIGTERM after the
calls in progress are answered.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.broker.client_port import BindError, add_services, bind, client_server
from rocketcluster.broker.collector import freeze_survivors, tune_collector
from rocketcluster.broker.event_loop import EVENT_LOOPS, loop_factory
from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel
from rocketcluster.broker.front.relay import RelayServicer, StoreLink
from rocketcluster.broker.front.sizing import front_share
from rocketcluster.broker.messaging.admission import ClientAdmission

log = logging.getLogger("rocketcluster.broker.front")

GRACE_SECONDS = 2.0
STATS_INTERVAL_S = 2.0
EXIT_STORE_GONE = 3


class FrontProcess:
    def __init__(self, index: int, fronts: int) -> None:
        self.index = index
        self.fronts = fronts
        self.link = StoreLink()
        self._config: asyncio.Future[tuple[str, str]] | None = None
        self._observations: list[tuple[str, int, float]] = []
        self._refusals_sent: dict[str, int] = {}
        self._closing = False

    def _on_frames(self, frames: list[tuple[Any, ...]]) -> None:
        for frame in frames:
            if frame[0] == f.CONFIG:
                if self._config is not None and not self._config.done():
                    self._config.set_result((frame[1], frame[2]))
                continue
            self.link.on_frame(frame)

    def _on_lost(self, why: str) -> None:
        if self._closing:
            return  # our own close, at the end of a SIGTERM
        # Nothing here outlives the store process: stop serving now, so no client
        # waits on a front that can answer nothing.
        log.warning("front %d: the store process is gone (%s); exiting", self.index, why)
        logging.shutdown()
        os._exit(EXIT_STORE_GONE)

    def _observe(self, rpc: str, code: int, seconds: float) -> None:
        self._observations.append((rpc, code, seconds))

    async def run(self, channel_fd: int) -> int:
        loop = asyncio.get_running_loop()
        self._config = loop.create_future()
        sock = socket.socket(fileno=channel_fd)
        channel = await Channel.open(sock, self._on_frames, self._on_lost)
        self.link.attach(channel)
        config_json, log_level = await self._config
        logging.getLogger().setLevel(log_level)
        cfg = BrokerProcessConfig.model_validate_json(config_json)
        limits = front_share(cfg.client_limits, self.fronts)
        admission = ClientAdmission(limits)
        server = client_server(cfg, limits, shared_port=True)
        add_services(
            server,
            cfg,
            admission,
            RelayServicer(self.link, f.MESSAGING_SERVICE.full_name),
            RelayServicer(self.link, f.CONSUME_SERVICE.full_name),
            self._observe,
            relay=True,
        )
        try:
            address = bind(server, cfg)
        except BindError as exc:
            log.critical("front %d: %s", self.index, exc)
            return 1
        await server.start()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        freeze_survivors()
        channel.send((f.HELLO, self.index, os.getpid(), f.table_digest()))
        log.info("front %d (pid %d) serving clients on %s", self.index, os.getpid(), address)
        stats = loop.create_task(self._report(admission))
        await stop.wait()
        stats.cancel()
        await server.stop(GRACE_SECONDS)
        self._closing = True
        channel.close()
        return 0

    async def _report(self, admission: ClientAdmission) -> None:
        """STATS: the admission ledger's connections and new refusals, the RPCs
        answered here (refused) for the store process's metrics."""
        ledger = admission.ledger
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            refusals = {
                limit: count - self._refusals_sent.get(limit, 0)
                for limit, count in ledger.refusals.items()
                if count != self._refusals_sent.get(limit, 0)
            }
            self._refusals_sent = dict(ledger.refusals)
            observations, self._observations = self._observations, []
            self.link.send((f.STATS, ledger.connections, refusals, observations))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One front process of a broker.")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--fronts", type=int, required=True, help="how many fronts share")
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=os.environ.get("ROCKETCLUSTER_EVENT_LOOP", "uvloop"),
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tune_collector()
    front = FrontProcess(args.index, args.fronts)
    with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
        sys.exit(runner.run(front.run(args.channel_fd)))
