from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageToStore
from rocketcluster.ctl.testing import small_store_config as small_config

__all__ = ["small_config"]


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
