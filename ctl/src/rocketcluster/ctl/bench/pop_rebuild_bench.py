"""POP state rebuild benchmark: what a replica pays to rebuild its consumption state.

An old master that rejoins as a slave and cuts a tail holding POP journal records
rebuilds its state from the journal (broker/messaging/pop_replay.py). The seed-3 soak
found that rebuild replaying the whole retained journal in one piece, holding the
broker's event loop for up to 33 s. This benchmark writes a master's journal with the
real writer (a receive and an ack per write, over several queues; with or without the
master's checkpoints), then rebuilds it in a fresh PopService as a replica does, and
reports, per case, the records replayed, the time, and the longest the event loop was
held (a ticker task measures the gaps between its turns):

- ``one piece``: the whole journal in one call, what the rebuild did before (and still
  what a promotion does with what is left);
- ``slices, no checkpoint``: the same records in slices that yield (a journal an older
  version wrote);
- ``slices, checkpoints``: the master's checkpoints every CHECKPOINT_EVERY_RECORDS, so
  the rebuild starts from the latest.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop import CHECKPOINT_EVERY_RECORDS, PopService
from rocketcluster.broker.messaging.pop_journal import KeyedOp, PopJournalWriter, StateKey
from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig
from rocketcluster.broker.store.record import StoredMessage

QUEUES = 24  # 3 consumer groups x 8 queues
# (journal, checkpoint cadence, ways to rebuild it: (name, in slices))
JOURNALS: tuple[tuple[str, int, tuple[tuple[str, bool], ...]], ...] = (
    ("no checkpoint", 0, (("one piece", False), ("slices", True))),
    ("checkpoints", CHECKPOINT_EVERY_RECORDS, (("slices", True),)),
)


def _no_dead_letters(group: str, msg: StoredMessage, attempts: int) -> MessageToStore:
    raise AssertionError("the benchmark dead-letters nothing")


async def _open(root: Path) -> MessageStore:
    return await MessageStore.open(
        StoreConfig(root_dir=root, flush=FlushMode.ASYNC, segment_size=256 << 20)
    )


async def write_journal(store: MessageStore, records: int, checkpoint_every: int) -> int:
    """A master's journal of ``records`` writes (a delivery and an ack each, on the
    queues in turn), a checkpoint after every ``checkpoint_every`` (0: none); returns
    how many checkpoints."""
    writer = PopJournalWriter(store.put_batch, writer="bench")
    keys: list[StateKey] = [(f"g{q % 3}", "t", q // 3) for q in range(QUEUES)]
    states = {k: QueueConsumeState(0) for k in keys}
    for key, state in states.items():  # a master records each state's base when it loads it
        writer.append(key, ["Z", state.full_snapshot()])
    for i in range(records):
        key = keys[i % QUEUES]
        state = states[key]
        offset = state.next_offset
        state.deliver(offset, 1, 10**13, i, "c", False)
        state.mark_done(offset)
        writer.append(key, ["D", offset, 1, 10**13, i, "c", 0])
        writer.append(key, ["K", offset])
        if checkpoint_every and writer.records_since_checkpoint >= checkpoint_every:
            ops: list[KeyedOp] = [(k, ["Z", s.full_snapshot()]) for k, s in states.items()]
            writer.append_checkpoint(ops)
        result = await writer.sync()
        if not result.ok:
            raise RuntimeError(f"journal write failed: {result.status} {result.reason}")
    await store.flush()
    store.dispatcher.dispatch_until(store.dispatch_limit)
    return writer.checkpoints


async def rebuild(store: MessageStore, sliced: bool) -> dict[str, Any]:
    """Rebuild as a fresh replica does; the time, the records and the longest hold."""
    replica = PopService(store, ArrivalNotifier(), MessagingTuning(), _no_dead_letters)
    longest = 0.0
    last = time.perf_counter()

    async def tick() -> None:
        nonlocal longest, last
        while True:
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    began = time.perf_counter()
    last = began
    if sliced:
        replica.replay()
        await replica.replayed()
    else:
        replica.replayer.catch_up()  # one piece: the loop waits for all of it
        await asyncio.sleep(0)
    seconds = time.perf_counter() - began
    ticker.cancel()
    await asyncio.gather(ticker, return_exceptions=True)
    return {
        "records_replayed": replica.replayer.applied,
        "seconds": round(seconds, 3),
        "longest_hold_ms": round(max(longest, time.perf_counter() - last) * 1000, 1),
        "states": len(replica.states()),
    }


async def run_pop_rebuild_bench(work_dir: Path | None, records: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pop-rebuild-", dir=work_dir))
    rows: list[dict[str, Any]] = []
    try:
        for name, checkpoint_every, cases in JOURNALS:
            store = await _open(root / name.replace(" ", "-"))
            try:
                began = time.perf_counter()
                checkpoints = await write_journal(store, records, checkpoint_every)
                written_s = time.perf_counter() - began
                for how, sliced in cases:
                    row = await rebuild(store, sliced)
                    rows.append(
                        {
                            "case": f"{how}, {name}",
                            "journal_records": records,
                            "checkpoints": checkpoints,
                            "write_s": round(written_s, 1),
                            **row,
                        }
                    )
            finally:
                await store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"records": records, "checkpoint_every": CHECKPOINT_EVERY_RECORDS, "cases": rows}
