"""A writer process for crash demos and tests: sync-flush puts from several tasks,
printing ``ACK <msg id> <end offset>`` after each acknowledged put.

Run as ``python -m rocketcluster.ctl.store_writer DIR WRITERS BATCH RUN [TOPICS]``;
it writes until it is killed (that is the point). With TOPICS, messages go round
TOPICS topics of QUEUES queues each (``crash-<n>``): a store of many queues.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig

TOPIC = "crash"
QUEUES = 4


def writer_config(root: Path) -> StoreConfig:
    """Small segments and files, so a short run crosses many boundaries."""
    return StoreConfig(
        root_dir=root,
        segment_size=64 * 1024,
        max_message_bytes=4096,
        max_properties_bytes=512,
        cq_block_entries=4,
        index_entries_per_table=4096,
        index_map_size=64 << 20,
        flush=FlushMode.SYNC,
        checkpoint_interval_ms=20,
    )


def spread_topic(n: int, topics: int) -> str:
    """The topic message ``n`` goes to when a writer spreads over ``topics`` topics."""
    return f"{TOPIC}-{(n // QUEUES) % topics}"


async def run(root: Path, writers: int, batch: int, run_tag: str, topics: int = 0) -> None:
    store = await MessageStore.open(writer_config(root))
    print("READY", flush=True)

    async def writer(w: int) -> None:
        n = 0
        while True:
            # Spread: the writers' messages in turn, g-th overall, round every queue.
            places = [(n + k) * writers + w for k in range(batch)]
            msgs = [
                MessageToStore.build(
                    spread_topic(places[k], topics) if topics else TOPIC,
                    places[k] % QUEUES if topics else (w + k) % QUEUES,
                    f"{run_tag}-w{w}-n{n + k}".encode() * 20,
                    keys=(f"writer-{w}",),
                    msg_id=f"{run_tag}-w{w}-n{n + k}",
                )
                for k in range(batch)
            ]
            n += batch
            result = await store.put_batch(msgs)
            if not result.ok:
                # A refused put (a full disk, say) is never retried in a loop that
                # would spin without yielding: the writer stops and says why.
                raise SystemExit(f"put refused: {result.status.value}: {result.reason}")
            end = result.records[-1].physical_offset + result.records[-1].size
            sys.stdout.write("".join(f"ACK {m.msg_id} {end}\n" for m in msgs))
            sys.stdout.flush()

    await asyncio.gather(*(writer(w) for w in range(writers)))


def write_then_kill(
    root: Path, acks_before_kill: int, writers: int, batch: int, run_tag: str, topics: int = 0
) -> tuple[dict[str, int], float]:
    """Start a writer process, SIGKILL it after ``acks_before_kill`` acks.

    Returns every acknowledged message id with the end offset of its record (acks
    already in the pipe at the kill count too) and the seconds spent writing.
    """
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            __name__,
            str(root),
            str(writers),
            str(batch),
            run_tag,
            *([str(topics)] if topics else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError("the writer process did not start")
        started = time.monotonic()
        while len(acked) < acks_before_kill:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the writer process exited early")
            _, msg_id, end = line.split()
            acked[msg_id] = int(end)
        elapsed = time.monotonic() - started
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout:
            if line.startswith("ACK "):
                _, msg_id, end = line.split()
                acked[msg_id] = int(end)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the writer ended with {proc.returncode}, not by SIGKILL")
    return acked, elapsed


def main() -> None:
    if len(sys.argv) not in (5, 6):
        sys.exit("usage: python -m rocketcluster.ctl.store_writer DIR WRITERS BATCH RUN [TOPICS]")
    topics = int(sys.argv[5]) if len(sys.argv) == 6 else 0
    asyncio.run(run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], topics))


if __name__ == "__main__":
    main()
