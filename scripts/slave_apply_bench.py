"""In-process CPU of a slave applying replicated data (issue #18, SLAVE part).

    python3 -m uv run --frozen python scripts/slave_apply_bench.py [messages] [--profile]

A master store takes ``messages`` 1 KiB messages in batches of 32 (four queues, the
properties the gRPC send path stores); its commit log is then fed to a slave store in
frames of 32 records the way ha/slave.py does (append_replicated, then the confirm
offset), and the process CPU (every thread: the event loop, the index writer, the
flush thread) is divided by the messages. Deterministic where the cluster loop is not.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.config import StoreConfig
from rocketcluster.broker.store.record import MessageToStore, encode_properties
from rocketcluster.broker.store.replica import append_replicated

BATCH = 32
BODY = b"x" * 1024


def batch_of(n: int, queue_id: int) -> list[MessageToStore]:
    out = []
    for _ in range(n):
        mid = uuid.uuid4().hex.upper()
        props = {"UNIQ_KEY": mid, "BORN_HOST": "10.0.0.7", "MESSAGE_TYPE": "1"}
        out.append(MessageToStore("orders", queue_id, BODY, encode_properties(props), msg_id=mid))
    return out


async def main(messages: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="slavebench-") as tmp:
        cfg = StoreConfig(root_dir=Path(tmp) / "m", segment_size=64 << 20)
        master = await MessageStore.open(cfg)
        batches = [batch_of(BATCH, i % 4) for i in range(messages // BATCH)]
        t0 = time.process_time()
        for b in batches:
            await master.put_batch(b)
        await asyncio.sleep(0)
        master.index.wait_indexed(master.commitlog.write_offset, 30)
        master_cpu = time.process_time() - t0
        end = master.commitlog.write_offset
        frames = []
        pos = 0
        clog = master.commitlog
        while pos < end:
            start = pos
            for _ in range(BATCH):
                if pos >= end:
                    break
                pos += int.from_bytes(clog.read(pos, 4), "big")
            frames.append((start, clog.read(start, pos - start)))
        await master.close()

        slave = await MessageStore.open(
            StoreConfig(root_dir=Path(tmp) / "s", segment_size=64 << 20)
        )
        prof = cProfile.Profile(time.thread_time) if profile else None
        t0 = time.process_time()
        th0 = time.thread_time()
        if prof:
            prof.enable()
        for offset, data in frames:
            append_replicated(slave, offset, data)
            slave.set_confirm_offset(min(offset + len(data), slave.commitlog.write_offset))
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        slave.index.wait_indexed(slave.commitlog.write_offset, 30)
        if prof:
            prof.disable()
        slave_cpu = time.process_time() - t0
        slave_loop = time.thread_time() - th0
        assert slave.dispatched_offset == end, (slave.dispatched_offset, end)
        await slave.close()
        n = len(batches) * BATCH
        print(
            f"messages {n}  master put+dispatch {master_cpu / n * 1e6:.1f} us/msg  "
            f"slave apply {slave_cpu / n * 1e6:.1f} us/msg "
            f"(event loop {slave_loop / n * 1e6:.1f}, other threads "
            f"{(slave_cpu - slave_loop) / n * 1e6:.1f})"
        )
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    argv = sys.argv[1:]
    asyncio.run(main(int(argv[0]) if argv and argv[0].isdigit() else 40000, "--profile" in argv))
