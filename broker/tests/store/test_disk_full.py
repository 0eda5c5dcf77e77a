"""A full disk (a real ENOSPC from a small tmpfs): a clear DISK_FULL status, nothing
acknowledged lost, no corruption, and writes resume once space is freed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.codes import Code, put_code
from rocketcluster.broker.store import DiskFullError, MessageStore, MessageToStore, PutStatus

from .conftest import small_config


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.fail("mounting a small tmpfs for ENOSPC needs root: run the tests as root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for ENOSPC: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def test_enospc_is_a_clean_refusal(tiny_disk: Path) -> None:
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\x01" * (400 * 1024))
    cfg = small_config(
        tiny_disk / "store",
        segment_size=64 * 1024,
        disk_full_ratio=1.0,  # let the real ENOSPC happen instead of the early refusal
        disk_max_used_ratio=1.0,
        index_map_size=8 << 20,
    )
    store = await MessageStore.open(cfg)
    acked: list[str] = []
    statuses: set[PutStatus] = set()
    try:
        for i in range(5000):
            msg = MessageToStore.build("full", i % 2, b"z" * 1500, msg_id=f"m{i}")
            result = await store.put(msg)
            statuses.add(result.status)
            if result.ok:
                acked.append(msg.msg_id)
            elif result.status is PutStatus.DISK_FULL:
                assert "no space left" in result.reason
                break
        assert PutStatus.DISK_FULL in statuses, statuses
        assert acked, "nothing fit before the disk filled"
        # A metadata write on the full disk either fits in LMDB's free pages or fails
        # clearly with DiskFullError — never half-applied.
        spec = TopicSpec(name="x" * 100, queues=8)
        try:
            store.metadata.put_topic(spec)
            assert store.metadata.get_topic(spec.name) == spec
        except DiskFullError as exc:
            assert "no space left" in str(exc)
            assert store.metadata.get_topic(spec.name) is None
        # Free space: writes resume and the stalled dispatch catches up.
        filler.unlink()
        store.refresh_disk_usage()
        resumed = await store.put(MessageToStore.build("full", 0, b"after", msg_id="after"))
        assert resumed.ok, resumed
        acked.append("after")
        store.retry_stalled_dispatch()
    finally:
        await store.close()
    store = await MessageStore.open(cfg)
    try:
        assert store.recovery.quarantined == []
        ids = {m.msg_id for m in store.commitlog.iter_records(store.commitlog.min_offset)}
        assert set(acked) <= ids
        total = sum(store.queue_offsets("full", q)[1] for q in range(2))
        assert total == len(ids)
    finally:
        await store.close()


async def test_ratio_refusal_before_the_disk_is_full(tiny_disk: Path) -> None:
    cfg = small_config(
        tiny_disk / "store",
        segment_size=64 * 1024,
        disk_full_ratio=0.5,
        disk_max_used_ratio=0.5,
        index_map_size=8 << 20,
    )
    store = await MessageStore.open(cfg)
    try:
        (tiny_disk / "filler").write_bytes(b"\x01" * (1024 * 1024))
        store.refresh_disk_usage()
        result = await store.put(MessageToStore.build("full", 0, b"x"))
        assert result.status is PutStatus.DISK_FULL
        assert "no space left" in result.reason and "writes stop at 50%" in result.reason
        # The broker's bookkeeping (the POP journal that records acks) may use the room
        # left above the ratio: acks go on while producers are refused.
        kept = await store.put_batch([MessageToStore.build("journal", 0, b"ack")], bookkeeping=True)
        assert kept.ok, kept
        # Clients get TOO_MANY_REQUESTS: the official producers back off, not retry at once.
        assert put_code(PutStatus.DISK_FULL) == Code.TOO_MANY_REQUESTS
    finally:
        await store.close()
