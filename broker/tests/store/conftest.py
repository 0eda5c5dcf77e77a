from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocketcluster.broker.store import FlushMode, MessageToStore, StoreConfig


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    """Tiny segments and consume-queue files so tests cross every boundary."""
    settings: dict[str, Any] = {
        "root_dir": root,
        "segment_size": 8192,
        "max_message_bytes": 2048,
        "max_properties_bytes": 512,
        "cq_entries_per_file": 16,
        "index_entries_per_table": 64,
        "index_map_size": 64 << 20,
        "flush": FlushMode.SYNC,
        "checkpoint_interval_ms": 50,
        "retention_interval_ms": 3_600_000,
        # The machine's disk is shared: its fill level must not drive these tests.
        "disk_max_used_ratio": 1.0,
        "disk_full_ratio": 1.0,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def message(i: int, *, topic: str = "orders", queues: int = 3, size: int = 100) -> MessageToStore:
    body = (f"message-{i}-".encode() * (size // 8 + 1))[:size]
    return MessageToStore.build(
        topic,
        i % queues,
        body,
        tag="even" if i % 2 == 0 else "odd",
        keys=(f"key-{i}", f"shared-{i % 5}"),
        msg_id=f"ID{i:030d}",
    )


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"
