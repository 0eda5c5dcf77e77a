"""What handing sends from a front process to the store process costs, per local
channel (issue #28: "over a local channel of your design ... measure before you
choose").

A front turns each client's SendMessage into stored-record bytes and hands the store
process compact batches; the store process appends them and answers each batch with
its records' offsets. This bench runs that exchange between two real processes, with
the store side doing only what every channel shares (copy the records into an
in-memory log, answer the offsets), so the difference between rows is the channel:

- ``unix``: a Unix stream socket, length-prefixed frames, asyncio streams on uvloop in
  both processes (one connection per front, requests multiplexed by id);
- ``shm``: two single-producer single-consumer rings in shared memory
  (``multiprocessing.shared_memory``), each with an ``eventfd`` doorbell the other
  side's loop waits on.

For each channel and batch size: messages/s, each side's CPU microseconds per
message (from ``/proc/<pid>/stat``), and the round trip p50/p99 of a batch, with
IN_FLIGHT batches outstanding as a front with many clients would have.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

CHANNELS = ("unix", "shm")
BATCHES = (1, 8, 32)
RECORD_BYTES = 1024
IN_FLIGHT = 16
RING_BYTES = 4 << 20
# A request: total length, request id, record count, then (length, bytes) per record.
REQUEST = struct.Struct("<IQI")
RECORD = struct.Struct("<I")
# A reply: total length, request id, record count, then one 8-byte offset per record.
REPLY = struct.Struct("<IQI")
OFFSET = struct.Struct("<Q")
# A ring's head (read position) and tail (write position), 8 bytes each, before its data.
RING_HEADER = struct.Struct("<QQ")

Handler = Callable[[bytes], bytes]


def encode_request(request_id: int, records: list[bytes]) -> bytes:
    parts = [RECORD.pack(len(r)) + r for r in records]
    body = b"".join(parts)
    return REQUEST.pack(REQUEST.size + len(body), request_id, len(records)) + body


def decode_request(frame: bytes) -> tuple[int, list[bytes]]:
    total, request_id, count = REQUEST.unpack_from(frame)
    if total != len(frame):
        raise ValueError(f"request frame of {len(frame)} bytes says {total}")
    records, at = [], REQUEST.size
    for _ in range(count):
        (size,) = RECORD.unpack_from(frame, at)
        at += RECORD.size
        records.append(frame[at : at + size])
        at += size
    if at != total:
        raise ValueError(f"request frame holds {total - at} bytes past its records")
    return request_id, records


def encode_reply(request_id: int, offsets: list[int]) -> bytes:
    body = b"".join(OFFSET.pack(o) for o in offsets)
    return REPLY.pack(REPLY.size + len(body), request_id, len(offsets)) + body


def decode_reply(frame: bytes) -> tuple[int, list[int]]:
    total, request_id, count = REPLY.unpack_from(frame)
    if total != len(frame) or total != REPLY.size + count * OFFSET.size:
        raise ValueError(f"reply frame of {len(frame)} bytes says {total} for {count} offsets")
    return request_id, [OFFSET.unpack_from(frame, REPLY.size + i * 8)[0] for i in range(count)]


class MemoryLog:
    """The store side's stand-in: appends records to memory, returns their offsets."""

    def __init__(self) -> None:
        self.data = bytearray()

    def handle(self, frame: bytes) -> bytes:
        request_id, records = decode_request(frame)
        offsets = []
        for record in records:
            offsets.append(len(self.data))
            self.data += record
        if len(self.data) > 64 << 20:  # a bench, not a store: keep memory flat
            self.data = bytearray()
        return encode_reply(request_id, offsets)


# --- the Unix socket channel ---------------------------------------------------------


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    (total,) = struct.unpack("<I", head)
    return head + await reader.readexactly(total - 4)


async def serve_unix(path: Path, handle: Handler, ready: Callable[[], None]) -> None:
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(handle(await read_frame(reader)))
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_unix_server(one, str(path))
    ready()
    async with server:
        await server.serve_forever()


class UnixFront:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._waiting: dict[int, asyncio.Future[list[int]]] = {}
        self._ids = 0
        self._replies = asyncio.get_running_loop().create_task(self._read_replies())

    @classmethod
    async def connect(cls, path: Path) -> UnixFront:
        return cls(*await asyncio.open_unix_connection(str(path)))

    async def _read_replies(self) -> None:
        while True:
            request_id, offsets = decode_reply(await read_frame(self._reader))
            self._waiting.pop(request_id).set_result(offsets)

    async def send(self, records: list[bytes]) -> list[int]:
        self._ids += 1
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = future
        self._writer.write(encode_request(self._ids, records))
        return await future

    async def close(self) -> None:
        self._replies.cancel()
        self._writer.close()


# --- the shared-memory channel -------------------------------------------------------


class Ring:
    """One direction: a single writer and a single reader in two processes, frames
    (each starting with its 4-byte length) in a circular buffer, an eventfd rung
    after each write. Positions only grow; a frame never wraps (a frame that does not
    fit before the end is written from the start, the gap marked by a zero length)."""

    def __init__(self, memory: shared_memory.SharedMemory, doorbell: int) -> None:
        if memory.buf is None:
            raise ValueError(f"shared memory {memory.name} is closed")
        self.memory = memory
        self.doorbell = doorbell
        self.buf: memoryview = memory.buf
        self.size = len(self.buf) - RING_HEADER.size

    def _positions(self) -> tuple[int, int]:
        return RING_HEADER.unpack_from(self.buf)

    def write(self, frame: bytes) -> bool:
        """False when it does not fit yet (the caller waits for the reader)."""
        if len(frame) > self.size:
            raise ValueError(f"a frame of {len(frame)} bytes never fits a ring of {self.size}")
        head, tail = self._positions()
        at = tail % self.size
        need = len(frame)
        if at + need > self.size:  # the rest of the buffer is too short: skip to the start
            need += self.size - at
        if tail + need - head > self.size:
            return False
        if at + len(frame) > self.size:
            struct.pack_into("<I", self.buf, RING_HEADER.size + at, 0)
            at = 0
        start = RING_HEADER.size + at
        self.buf[start : start + len(frame)] = frame
        struct.pack_into("<Q", self.buf, 8, tail + need)
        os.eventfd_write(self.doorbell, 1)
        return True

    def read_all(self) -> list[bytes]:
        head, tail = self._positions()
        frames = []
        while head < tail:
            at = head % self.size
            if self.size - at < 4:
                head += self.size - at
                continue
            (total,) = struct.unpack_from("<I", self.buf, RING_HEADER.size + at)
            if total == 0:  # the writer skipped to the start
                head += self.size - at
                continue
            start = RING_HEADER.size + at
            frames.append(bytes(self.buf[start : start + total]))
            head += total
        struct.pack_into("<Q", self.buf, 0, head)
        return frames


async def ring_frames(ring: Ring) -> list[bytes]:
    """Frames in ``ring`` once its doorbell rings."""
    loop = asyncio.get_running_loop()
    rung: asyncio.Future[None] = loop.create_future()

    def ring_rung() -> None:
        if not rung.done():
            rung.set_result(None)

    loop.add_reader(ring.doorbell, ring_rung)
    try:
        await rung
    finally:
        loop.remove_reader(ring.doorbell)
    os.eventfd_read(ring.doorbell)
    return ring.read_all()


async def write_frame(ring: Ring, frame: bytes) -> None:
    """``frame`` into ``ring``, polling while it is full (the reader frees space
    within a loop turn or two: a second doorbell for space is not worth its syscalls
    in a bench whose rings never fill)."""
    while not ring.write(frame):  # noqa: ASYNC110
        await asyncio.sleep(0.0005)


def open_ring(name: str, doorbell: int) -> Ring:
    """The other process's ring. Python 3.11 registers an attached segment with its
    resource tracker, which would unlink it when this process ends: the creator
    unlinks it, so the registration is taken back."""
    from multiprocessing import resource_tracker

    memory = shared_memory.SharedMemory(name=name)
    resource_tracker.unregister(memory._name, "shared_memory")  # type: ignore[attr-defined]
    return Ring(memory, doorbell)


async def serve_shm(requests: Ring, replies: Ring, handle: Handler) -> None:
    while True:
        for frame in await ring_frames(requests):
            await write_frame(replies, handle(frame))


class ShmFront:
    def __init__(self, requests: Ring, replies: Ring) -> None:
        self._requests, self._replies = requests, replies
        self._waiting: dict[int, asyncio.Future[list[int]]] = {}
        self._ids = 0
        self._task = asyncio.get_running_loop().create_task(self._read_replies())

    async def _read_replies(self) -> None:
        while True:
            for frame in await ring_frames(self._replies):
                request_id, offsets = decode_reply(frame)
                self._waiting.pop(request_id).set_result(offsets)

    async def send(self, records: list[bytes]) -> list[int]:
        self._ids += 1
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = future
        await write_frame(self._requests, encode_request(self._ids, records))
        return await future

    async def close(self) -> None:
        self._task.cancel()


# --- the two processes ---------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    channel: str
    batch: int
    messages: int
    seconds: float
    front_cpu_s: float
    store_cpu_s: float
    round_trips: list[float]

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.round_trips)
        return {
            "channel": self.channel,
            "batch": self.batch,
            "msgs_per_s": round(self.messages / self.seconds),
            "front_us_per_msg": round(self.front_cpu_s / self.messages * 1e6, 2),
            "store_us_per_msg": round(self.store_cpu_s / self.messages * 1e6, 2),
            "round_trip_p50_ms": round(statistics.median(ordered) * 1000, 3),
            "round_trip_p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3),
        }


async def drive(
    send: Callable[[list[bytes]], Awaitable[list[int]]], batch: int, seconds: float
) -> tuple[int, list[float]]:
    """IN_FLIGHT senders of ``batch`` records each until ``seconds`` passed; checks
    that every reply gives each record its own offset, in order."""
    records = [bytes([65 + i % 26]) * RECORD_BYTES for i in range(batch)]
    deadline = time.monotonic() + seconds
    sent = 0
    took: list[float] = []

    async def sender() -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            started = time.perf_counter()
            offsets = await send(records)
            took.append(time.perf_counter() - started)
            if len(offsets) != batch or any(
                b - a != RECORD_BYTES for a, b in itertools.pairwise(offsets)
            ):
                raise AssertionError(f"offsets {offsets[:4]}... for a batch of {batch}")
            sent += batch

    await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    return sent, took


def run_channel(channel: str, batch: int, seconds: float, work: Path) -> Row:
    """One row: a store process for ``channel``, this process as the front."""
    if channel not in CHANNELS:
        raise ValueError(f"channel {channel!r}: one of {', '.join(CHANNELS)}")
    import uvloop

    work.mkdir(parents=True, exist_ok=True)
    ring_args: list[str] = []
    rings: list[shared_memory.SharedMemory] = []
    bells: list[int] = []
    if channel == "shm":
        for _ in range(2):
            memory = shared_memory.SharedMemory(create=True, size=RING_HEADER.size + RING_BYTES)
            rings.append(memory)
            Ring(memory, -1).buf[: RING_HEADER.size] = RING_HEADER.pack(0, 0)
            bells.append(os.eventfd(0, os.EFD_NONBLOCK))
        ring_args = [rings[0].name, str(bells[0]), rings[1].name, str(bells[1])]
    socket_path = work / f"store-{os.getpid()}.sock"
    socket_path.unlink(missing_ok=True)
    store = subprocess.Popen(
        [sys.executable, "-m", __name__, channel, str(socket_path), *ring_args],
        stdout=subprocess.PIPE,
        pass_fds=bells,
    )
    try:
        assert store.stdout is not None
        if store.stdout.readline().strip() != b"READY":
            raise RuntimeError(f"the store process of {channel} did not start")

        async def front() -> tuple[int, list[float], float, float, float]:
            if channel == "unix":
                client: UnixFront | ShmFront = await UnixFront.connect(socket_path)
            else:
                client = ShmFront(Ring(rings[0], bells[0]), Ring(rings[1], bells[1]))
            try:
                await drive(client.send, batch, min(0.5, seconds / 4))  # warm up
                started, store_before = time.perf_counter(), cpu_seconds(store.pid)
                front_before = cpu_seconds(os.getpid())
                sent, took = await drive(client.send, batch, seconds)
                elapsed = time.perf_counter() - started
                front_cpu = cpu_seconds(os.getpid()) - front_before
                store_cpu = cpu_seconds(store.pid) - store_before
                return sent, took, elapsed, front_cpu, store_cpu
            finally:
                await client.close()

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            sent, took, elapsed, front_cpu, store_cpu = runner.run(front())
        return Row(channel, batch, sent, elapsed, front_cpu, store_cpu, took)
    finally:
        store.terminate()
        store.wait(timeout=30)
        socket_path.unlink(missing_ok=True)
        for memory in rings:
            memory.close()
            memory.unlink()
        for bell in bells:
            os.close(bell)


def run_front_channel_bench(
    work: Path,
    seconds: float = 4.0,
    channels: tuple[str, ...] = CHANNELS,
    batches: tuple[int, ...] = BATCHES,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    rows = []
    for channel in channels:
        for batch in batches:
            progress(f"{channel}: batches of {batch}")
            rows.append(run_channel(channel, batch, seconds, work).summary())
    return {
        "record_bytes": RECORD_BYTES,
        "in_flight": IN_FLIGHT,
        "seconds": seconds,
        "rows": rows,
    }


def _store_main(argv: list[str]) -> None:
    """The store side: ``CHANNEL SOCKET [REQ_RING REQ_BELL REPLY_RING REPLY_BELL]``."""
    import uvloop

    channel, socket_path = argv[0], Path(argv[1])
    log = MemoryLog()

    def ready() -> None:
        sys.stdout.write("READY\n")
        sys.stdout.flush()

    async def main() -> None:
        if channel == "unix":
            await serve_unix(socket_path, log.handle, ready)
        else:
            requests = open_ring(argv[2], int(argv[3]))
            replies = open_ring(argv[4], int(argv[5]))
            ready()
            await serve_shm(requests, replies, log.handle)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


if __name__ == "__main__":
    _store_main(sys.argv[1:])
