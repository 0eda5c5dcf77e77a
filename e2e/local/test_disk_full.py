"""A broker whose disk fills, as a user meets it (issue #32 item 5): real broker
processes, their stores on small tmpfs filesystems, 256 KiB messages from the official
client, a ballast keeping the disk full.

- ``reject`` (the default): sends fail with a clear "no space left" error while the disk
  is full and no acknowledged message is deleted; reads and acks go on; once the
  ballast goes, writes resume by themselves and every acknowledged message is read back.
- ``deleteOldest``: sends go on while retention deletes the oldest segments, and the
  broker's ``rocketmq_storage_deleted_unconsumed_messages_total`` equals exactly the
  acknowledged messages that could not be read back.
- Three replicas (sync, inSyncReplicas 2, minInSyncReplicas 1): a slave whose disk is
  full leaves the SyncStateSet, the group keeps acknowledging, the slave comes back
  when the ballast goes, and every acknowledged message is read back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.disks import Ballast, free_bytes, small_filesystem
from rocketcluster.ctl.testing import local_broker, quiet_official_client, wait_for
from rocketcluster.ctl.workload import Cluster, Workload, audit, ha_cluster, running

pytestmark = pytest.mark.slow

MIB = 1 << 20
BODY = 256 * 1024
TOPIC = "orders"
# Small segments and messages so the tmpfs holds many segments; the store's own disk
# guards at their production defaults (the tests' defaults turn them off).
STORE = {
    "segment_size": 2 * MIB,
    "max_message_bytes": 512 * 1024,
    "disk_max_used_ratio": 0.75,
    "disk_full_ratio": 0.95,
}
DISK = 96 * MIB


def _standalone(policy: str) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "full"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"flush": "async", "retentionHours": 72, "diskFull": policy},
                "topics": [{"name": TOPIC, "queues": 2}],
                "consumerGroups": [{"name": "readback"}],
            },
        }
    )


class Sender:
    """The official Producer sending 256 KiB messages one at a time: what was
    acknowledged, and the errors of what was not."""

    def __init__(self, endpoints: str) -> None:
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=10), (TOPIC,)
        )
        self.acked: list[str] = []
        self.errors: list[str] = []
        self.n = 0

    def __enter__(self) -> Sender:
        quiet_official_client()
        self.producer.startup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.producer.shutdown()

    def send(self) -> bool:
        msg = Message()
        msg.topic = TOPIC
        msg.body = f"{self.n:08d}".encode() * (BODY // 8)
        msg.keys = f"k{self.n}"
        self.n += 1
        try:
            self.acked.append(self.producer.send(msg).message_id)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return False
        return True

    def send_for(self, seconds: float) -> tuple[int, int]:
        """Send for ``seconds``: (acknowledged, failed)."""
        acked, failed = len(self.acked), len(self.errors)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.send():
                time.sleep(0.1)
        return len(self.acked) - acked, len(self.errors) - failed


def read_back(
    endpoints: str, group: str, want: int = 0, timeout: float = 180, most: int | None = None
) -> set[str]:
    """Every message of TOPIC a new group receives (acknowledging each), until three
    polls in a row bring nothing (and at least ``want`` arrived, or ``timeout``).
    ``most``: acknowledge exactly that many and stop (the others become visible again
    after the invisible time)."""
    consumer = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials(), request_timeout=10),
        group,
        {TOPIC: FilterExpression()},
        await_duration=2,
    )
    consumer.startup()
    seen: set[str] = set()
    empty = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (empty < 3 or len(seen) < want):
            if most is not None and len(seen) >= most:
                break
            batch = consumer.receive(16, 30 if most is None else 10)
            empty = 0 if batch else empty + 1
            for msg in batch:
                if most is None or len(seen) < most:
                    consumer.ack(msg)
                    seen.add(msg.message_id)
    finally:
        consumer.shutdown()
    return seen


def metric(admin: str, name: str) -> float:
    text = httpx.get(f"http://{admin}/metrics", timeout=10).text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "disk", DISK) as mount:
        yield mount


def _fill_then_hold(sender: Sender, disk: Path) -> Ballast:
    """Store ~24 MiB, then a ballast leaving 3 MiB free: above the 95 % ceiling, with
    room for the broker's bookkeeping (the POP journal) in the reserve."""
    for _ in range(96):
        assert sender.send(), sender.errors[-1:]
    ballast = Ballast(disk, leave_free=3 * MIB)
    ballast.fill()
    assert free_bytes(disk) <= 3 * MIB
    # The broker reads its disk's fill level every 200 ms: what it accepts until then
    # is acknowledged like any message (and read back at the end).
    wait_for(lambda: not sender.send(), timeout=30, what="the first refusal")
    return ballast


def test_reject_refuses_clearly_keeps_everything_and_resumes(tmp_path: Path, disk: Path) -> None:
    overrides: dict[str, Any] = {**STORE, "data_dir": disk}
    with local_broker(_standalone("reject"), tmp_path / "run", overrides) as broker:
        admin = broker.admin_address
        with Sender(broker.endpoints) as sender:
            ballast = _fill_then_hold(sender, disk)
            try:
                # Kept full past two retention runs (every 10 s): nothing acknowledged,
                # every refusal says why, and retention deletes nothing unconsumed.
                acked, failed = sender.send_for(25)
                assert acked == 0 and failed > 0
                assert all("no space left" in e for e in sender.errors), sender.errors[:3]
                assert all("TooManyRequests" in e for e in sender.errors), sender.errors[:3]
                assert metric(admin, "rocketmq_storage_deleted_unconsumed_messages_total") == 0
                assert metric(admin, "rocketmq_storage_retention_held_for_consumers_segments") > 0
                assert metric(admin, "rocketmq_storage_retention_deleted_bytes_total") == 0
                # Reads and acks go on while the disk is full: the group reads 10.
                early = read_back(broker.endpoints, "readback", want=10, timeout=60, most=10)
                assert len(early) == 10
                assert httpx.get(f"http://{admin}/v1/broker", timeout=10).status_code == 200
            finally:
                ballast.release()
            # Space returns: writes resume by themselves (no restart).
            wait_for(sender.send, timeout=60, interval=0.5, what="sends to resume")
            for _ in range(20):
                assert sender.send(), sender.errors[-1:]
        rest = read_back(broker.endpoints, "readback", want=len(sender.acked) - len(early))
        lost = set(sender.acked) - early - rest
        assert not lost, f"{len(lost)} of {len(sender.acked)} acknowledged messages lost"
        assert metric(admin, "rocketmq_storage_deleted_unconsumed_messages_total") == 0


def test_delete_oldest_counts_what_it_deleted_unread(tmp_path: Path, disk: Path) -> None:
    overrides: dict[str, Any] = {**STORE, "data_dir": disk}
    with local_broker(_standalone("deleteOldest"), tmp_path / "run", overrides) as broker:
        admin = broker.admin_address
        with Sender(broker.endpoints) as sender:
            ballast = _fill_then_hold(sender, disk)
            try:
                # Retention deletes the oldest segments, read or not, to go on writing.
                sender.send_for(25)
                deleted = wait_for(
                    lambda: metric(admin, "rocketmq_storage_retention_deleted_bytes_total"),
                    timeout=60,
                    what="retention to delete",
                )
                assert deleted > 0
            finally:
                ballast.release()
        # No consumer group had read anything: every message retention removed was
        # deleted unconsumed, and the metric counts exactly those.
        everything = read_back(broker.endpoints, "readback")
        assert everything <= set(sender.acked)
        unread = len(sender.acked) - len(everything)
        assert unread > 0
        assert metric(admin, "rocketmq_storage_deleted_unconsumed_messages_total") == unread


def _sync_state_set(cluster: Cluster) -> set[int]:
    view = cluster.group_view()
    return set() if view is None else {int(b) for b in view["syncStateSet"]}


def test_a_full_replica_leaves_the_sync_state_set_and_returns(tmp_path: Path) -> None:
    manifest = ha_cluster(name="full")
    run = tmp_path / "run"
    group = manifest.broker_group_name(0)
    names = [f"{group}-{replica}" for replica in range(3)]
    with (
        small_filesystem(run / "data" / names[0], DISK),
        small_filesystem(run / "data" / names[1], DISK),
        small_filesystem(run / "data" / names[2], DISK),
        running(run, manifest, dict(STORE)) as cluster,
    ):
        master = cluster.master()
        view = cluster.wait_in_sync(3)
        slave = next(
            p for p in cluster.brokers() if p["name"] != master["name"]
        )  # any replica but the master
        slave_view = cluster.broker_view(slave)
        assert slave_view is not None
        slave_id = int(slave_view["brokerId"])
        assert slave_id in {int(b) for b in view["syncStateSet"]}
        slave_disk = run / "data" / slave["name"]
        workload = Workload(cluster.endpoints)
        workload.start()
        ballast = Ballast(slave_disk, leave_free=0)
        with Sender(cluster.endpoints) as sender:
            try:
                ballast.fill()
                # 4 MiB of 256 KiB messages: the slave needs a segment it has no room
                # for. It stores and acknowledges nothing more, leaves the set, and
                # the group goes on acknowledging with the master and the other slave.
                for _ in range(16):
                    assert sender.send(), sender.errors[-1:]
                wait_for(
                    lambda: slave_id not in _sync_state_set(cluster),
                    timeout=120,
                    what=f"broker {slave_id} to leave the SyncStateSet",
                )
                assert len(_sync_state_set(cluster)) == 2
                for _ in range(8):  # acknowledged by the master and the other slave
                    assert sender.send(), sender.errors[-1:]
            finally:
                ballast.release()
            # Room again: the slave catches up and is back in the set.
            wait_for(
                lambda: slave_id in _sync_state_set(cluster),
                timeout=120,
                what=f"broker {slave_id} back in the SyncStateSet",
            )
            for _ in range(8):
                assert sender.send(), sender.errors[-1:]
        workload.stop()
        assert len(workload.acked) > 100
        acked = set(workload.acked) | set(sender.acked)
        seen = audit(cluster.endpoints, "audit", acked)
        lost = acked - set(seen)
        assert not lost, f"{len(lost)} acknowledged messages lost"
