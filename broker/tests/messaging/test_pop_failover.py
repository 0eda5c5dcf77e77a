"""Consume state on a broker that becomes master again (found by the chaos suite).

A broker keeps the POP state it saved while it was master; as a slave it then only
receives the new master's committed offsets. Promoted again, it used to restore its
old saved state and redeliver everything the group had acknowledged since.
"""

from __future__ import annotations

from pathlib import Path

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop import PopService
from rocketcluster.broker.store import MessageStore, MessageToStore, StoredMessage
from rocketcluster.ctl.testing import small_store_config


def _no_dead_letters(group: str, msg: StoredMessage, attempts: int) -> MessageToStore:
    raise AssertionError("no dead letters in this test")


async def test_a_promoted_broker_resumes_from_the_replicated_offset(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store", segment_size=1 << 20)
    store = await MessageStore.open(config)
    try:
        await store.put_batch(
            [MessageToStore.build("t", 0, b"x", msg_id=f"ID{i:030d}") for i in range(50)]
        )
        pop = PopService(store, ArrivalNotifier(), MessagingTuning(), _no_dead_letters)
        earlier = QueueConsumeState(3)  # saved in this broker's earlier term as master
        earlier.deliver(3, 1, deadline_ms=0, nonce=1)
        store.metadata.put_value("pop/g/t/0", earlier.snapshot())
        store.metadata.commit_offset("g", "t", 0, 40)  # replicated from the newer master
        state = pop.state("g", "t", 0)
        assert state.committed == 40
        assert state.redeliverable(now_ms=10**15) == []  # offset 3 was acknowledged since

        # With no newer offset the saved state is what counts (a plain restart).
        store.metadata.put_value("pop/g/t/1", QueueConsumeState(7).snapshot())
        store.metadata.commit_offset("g", "t", 1, 7)
        assert pop.state("g", "t", 1).committed == 7
    finally:
        await store.close()
