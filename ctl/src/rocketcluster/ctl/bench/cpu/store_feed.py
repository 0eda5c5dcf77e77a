"""A stand-in front process that feeds its store process official SendMessage calls as
fast as it answers them: what the store process costs per message when fronts on many
cores keep it busy, which two shared cores cannot show with real clients and fronts.

The broker starts it in place of ``rocketcluster.broker.front`` when its environment
says so (``ROCKETCLUSTER_FRONT_MODULE``, broker/front/launch.py); it speaks the same
channel: takes CONFIG, says HELLO (the broker is then ready), and waits. It feeds only
once the bench writes ``<go dir>/<store pid>`` (the master's, so a slave's feeder never
sends), a JSON of what to do: ``{"topic", "seconds", "warmup", "inflight"}``. Each
call is one message of 1 KiB, as the official producer sends it (a new message id
each, one message per SendMessage), from ``inflight`` calls kept outstanding — the
calls four official client processes keep in flight in the front cases. The result,
CPU seconds of the store process over the measured window (``/proc``, all its
threads) and the calls answered in it, goes to ``<go dir>/<store pid>.result``; the
window's start is marked by ``<go dir>/<store pid>.measuring``.

``python -m rocketcluster.ctl.bench.cpu.store_feed --channel-fd N --index I --fronts K``
(the front's arguments); ``ROCKETCLUSTER_FEED_DIR`` names the go dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel
from rocketcluster.ctl.bench.client_bench import BODY, _cpu_seconds

FEED_DIR_ENV = "ROCKETCLUSTER_FEED_DIR"
SEND = f.METHOD_INDEX[(f.MESSAGING_SERVICE.full_name, "SendMessage")]
METADATA = (("x-mq-client-id", f"store-feed@{os.getpid()}"), ("x-mq-language", "PYTHON"))
POLL_S = 0.1


def send_request(topic: str, n: int) -> bytes:
    """One SendMessage of one message, as the official producer builds it."""
    born = Timestamp()
    born.GetCurrentTime()
    message = pb.Message(
        topic=pb.Resource(name=topic),
        body=BODY,
        system_properties=pb.SystemProperties(
            message_id=f"01FEED{os.getpid():08X}{n:016X}",
            born_timestamp=born,
            born_host="store-feed",
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.NORMAL,
        ),
    )
    request: bytes = spb.SendMessageRequest(messages=[message]).SerializeToString()
    return request


async def _appears(path: Path) -> None:
    """Until the bench writes ``path`` (a file, not an event this process can await)."""
    while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110
        await asyncio.sleep(POLL_S)


class Feeder:
    def __init__(self) -> None:
        self.channel: Channel | None = None
        self.config: asyncio.Future[None] | None = None
        self.waiting: dict[int, tuple[asyncio.Future[bytes], float]] = {}
        self.ids = 0

    def on_frames(self, frames: list[tuple[Any, ...]]) -> None:
        for frame in frames:
            kind = frame[0]
            if kind == f.CONFIG and self.config is not None and not self.config.done():
                self.config.set_result(None)
            elif kind in (f.REPLY, f.END):
                waiting = self.waiting.pop(frame[1], None)
                if waiting is not None and not waiting[0].done():
                    waiting[0].set_result(frame[2] if kind == f.REPLY else b"")

    def on_lost(self, why: str) -> None:
        os._exit(3)  # the store process is gone: nothing to feed

    async def call(self, payload: bytes) -> bytes:
        assert self.channel is not None
        self.ids += 1
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[self.ids] = (future, time.perf_counter())
        self.channel.send((f.CALL, self.ids, SEND, 10.0, "ipv4:127.0.0.1:1", METADATA, payload))
        return await future

    async def feed(self, topic: str, until: float, counts: dict[str, int]) -> None:
        while time.monotonic() < until:
            answer = spb.SendMessageResponse.FromString(
                await self.call(send_request(topic, self.ids + 1))
            )
            counts["ok" if answer.status.code == 20000 else "failed"] += 1

    async def run(self, channel_fd: int, index: int) -> None:
        loop = asyncio.get_running_loop()
        self.config = loop.create_future()
        self.channel = await Channel.open(
            socket.socket(fileno=channel_fd), self.on_frames, self.on_lost
        )
        await self.config
        self.channel.send((f.HELLO, index, os.getpid(), f.table_digest()))
        store = os.getppid()
        go = Path(os.environ[FEED_DIR_ENV]) / str(store)
        await _appears(go)
        spec = json.loads(go.read_text())
        inflight = int(spec["inflight"])
        warm = {"ok": 0, "failed": 0}
        until = time.monotonic() + float(spec["warmup"])
        await asyncio.gather(*(self.feed(spec["topic"], until, warm) for _ in range(inflight)))
        counts = {"ok": 0, "failed": 0}
        go.with_name(f"{store}.measuring").touch()  # the bench reads the other roles now
        cpu_before, started = _cpu_seconds(store), time.perf_counter()
        until = time.monotonic() + float(spec["seconds"])
        await asyncio.gather(*(self.feed(spec["topic"], until, counts) for _ in range(inflight)))
        cpu, wall = _cpu_seconds(store) - cpu_before, time.perf_counter() - started
        result = {
            "inflight": inflight,
            "messages": counts["ok"],
            "failed": counts["failed"],
            "window_s": wall,
            "msgs_per_s": counts["ok"] / wall,
            "store_cpu_s": cpu,
            "store_cores": cpu / wall,
            "store_us_per_msg": cpu * 1e6 / max(1, counts["ok"]),
        }
        temporary = go.with_suffix(".tmp")
        temporary.write_text(json.dumps(result))
        temporary.replace(go.with_name(f"{store}.result"))
        await asyncio.Event().wait()  # until the broker stops it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Feed a store process like many fronts.")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--fronts", type=int, required=True)
    args = parser.parse_args(argv)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        sys.exit(runner.run(Feeder().run(args.channel_fd, args.index)))


if __name__ == "__main__":
    main()
