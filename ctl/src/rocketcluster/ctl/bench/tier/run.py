"""The whole tier benchmark in one call: the in-process produce cases, the produce
cases through a broker, then the cold reads, in one work directory that is removed at
the end and with one S3 server (when S3 is measured) that every case shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocketcluster.ctl.bench.s3_process import S3Endpoint
from rocketcluster.ctl.bench.tier.backends import Backends, s3_backends
from rocketcluster.ctl.bench.tier.broker_case import BrokerLoad, run_broker_produce
from rocketcluster.ctl.bench.tier.settings import (
    BUCKET,
    PUT_BATCH,
    QUEUES,
    RECORD_BODY,
    TierSettings,
)
from rocketcluster.ctl.bench.tier.store_cases import run_produce, run_reads

GOAL_SLOWDOWN = 0.10


@contextlib.contextmanager
def _s3_server(enabled: bool) -> Iterator[S3Endpoint | None]:
    if not enabled:
        yield None
        return
    from rocketcluster.ctl.bench.s3_process import s3_server_process

    with s3_server_process(BUCKET) as server:
        yield server


async def run_tier_bench(
    work_dir: Path | None = None,
    seconds: float = 5.0,
    *,
    messages: int = 65_536,
    reps: int = 3,
    writers: int = 8,
    read_batch: int = 32,
    s3: bool = True,
    broker: bool = True,
    load: BrokerLoad | None = None,
    settings: TierSettings | None = None,
) -> dict[str, Any]:
    """In-process produce, produce through a broker (unless ``broker`` is False), then
    cold reads; ``seconds`` is the in-process case's length, ``load.seconds`` the
    broker case's."""
    settings = settings or TierSettings()
    load = load or BrokerLoad()
    base = Path(tempfile.mkdtemp(prefix="rc-bench-tier-", dir=work_dir))
    kinds = ["posix", "s3"] if s3 else ["posix"]
    try:
        with _s3_server(s3) as server:
            backends = Backends(base / "posix", None if server is None else s3_backends(server))
            backends.posix_root.mkdir()
            produce = await run_produce(base, backends, kinds, seconds, reps, writers, settings)
            through_broker = (
                await asyncio.to_thread(
                    run_broker_produce, base, kinds, load, reps, settings, server
                )
                if broker
                else None
            )
            reads = await run_reads(base, backends, kinds, messages, reps, read_batch, settings)
        return {
            "record_body_bytes": RECORD_BODY,
            "queues": QUEUES,
            "upload_batch_bytes": settings.upload_batch_bytes,
            "upload_interval_s": settings.upload_interval_s,
            "read_ahead_bytes": settings.read_ahead_bytes,
            "s3_server": "moto in a separate process" if server is not None else None,
            "broker_produce": through_broker,
            "produce_what": "an in-process MessageStore at saturation: the worst case",
            "put_batch": PUT_BATCH,
            "writers": writers,
            "seconds_per_case": seconds,
            "reps": reps,
            "produce": produce,
            "uploader_slowdown": {r["case"]: r["slowdown"] for r in produce if "slowdown" in r},
            "goal_slowdown": GOAL_SLOWDOWN,
            "read_batch": read_batch,
            "read": reads,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
