"""`rocketctl demo store`: the store's promise, shown end to end.

A writer process appends with sync flush from 8 tasks and reports every
acknowledgement; it is killed with SIGKILL mid-stream; the store is reopened
(recovery runs), every acknowledged message is looked up, and a consumer reads the
queues back. Nothing acknowledged may be missing. Each step is told as it happens
(``say``); the report returned is what ``--json`` prints.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketcluster.broker.store import MessageStore
from rocketcluster.ctl import demo_text as text
from rocketcluster.ctl.store_writer import QUEUES, TOPIC, write_then_kill, writer_config

ACKS_BEFORE_KILL = 3000
WRITERS = 8


def _silent(_: str) -> None:
    """``say`` for ``--json``: the report alone."""


async def _audit(root: Path, acked: dict[str, int]) -> dict[str, Any]:
    store = await MessageStore.open(writer_config(root))
    try:
        report = store.recovery
        stored = [m.msg_id for m in store.commitlog.iter_records(store.commitlog.min_offset)]
        missing = sorted(set(acked) - set(stored))
        sample_id = next(iter(acked))
        by_id = [m.msg_id for m in store.lookup_by_id(sample_id)]
        by_key = len(store.lookup_by_key(TOPIC, "writer-3", limit=1000))
        consumed = 0
        for qid in range(QUEUES):
            offset, hi = store.queue_offsets(TOPIC, qid)
            while offset < hi:
                got = store.get_messages(TOPIC, qid, offset, 64)
                consumed += len(got.messages)
                offset = got.next_offset
        return {
            "recovery": {
                "seconds": round(report.seconds, 4),
                "clean_shutdown": report.clean_shutdown,
                "log_end": report.end_offset,
                "stopped_because": report.stop_reason,
                "records_redispatched": report.records_redispatched,
                "quarantined": [q.reason for q in report.quarantined],
            },
            "stored": len(stored),
            "consumed_through_queues": consumed,
            "lookup_by_id": {sample_id: by_id},
            "lookup_by_key_writer_3": by_key,
            "lost": len(missing),
            "lost_examples": missing[:5],
        }
    finally:
        await store.close()


def run_store_demo(root: Path, *, say: Callable[[str], None] = _silent) -> dict[str, Any]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    say(text.store_writing_line(WRITERS, ACKS_BEFORE_KILL, str(root)))
    acked, elapsed = write_then_kill(
        root, ACKS_BEFORE_KILL, writers=WRITERS, batch=4, run_tag="demo"
    )
    per_s = round(ACKS_BEFORE_KILL / elapsed)
    say(text.store_killed_line(len(acked), per_s))
    audit = asyncio.run(_audit(root, acked))
    recovery = audit["recovery"]
    say(
        text.store_recovered_line(
            recovery["seconds"],
            recovery["log_end"],
            recovery["stopped_because"],
            recovery["records_redispatched"],
        )
    )
    say(
        text.store_audit_line(
            len(acked), audit["stored"], audit["consumed_through_queues"], audit["lost"]
        )
    )
    problems = []
    if not acked:
        problems.append("the writer acknowledged nothing")
    if audit["lost"]:
        problems.append(f"{audit['lost']:,} acknowledged records are missing after recovery")
    return {
        "what": "sync-flush writer killed with SIGKILL mid-stream, then recovered and audited",
        "directory": str(root),
        "acknowledged": len(acked),
        "acknowledged_per_s_before_kill": per_s,
        **audit,
        "problems": problems,
        "verdict": "no acknowledged message lost" if not problems else "; ".join(problems),
    }
