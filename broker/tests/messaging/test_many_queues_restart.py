"""A broker of 20,000 queues (2,500 topics x 8, declared in its manifest) takes eight
messages a topic over gRPC (one request each, spread over its queues), restarts, and
serves every acknowledged message again: the admin API's paged queue listing counts
them where they were stored, a receive per topic brings back exactly what was
acknowledged, and the broker holds a few hundred file descriptors, not two per queue
(issue #27)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker

pytestmark = pytest.mark.slow

TOPICS = [f"many-{i:04d}" for i in range(2500)]
QUEUES = 8
GROUP = "many-readers"
IN_FLIGHT = 16
# A request waits behind the IN_FLIGHT - 1 before it in a broker that shares two
# cores with a parallel suite: a generous deadline, not the client's 10 s.
DEADLINE_S = 60.0
READY_S = 120.0
MAX_FDS = 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "many"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1},
                "topics": [{"name": t, "queues": QUEUES} for t in TOPICS],
                "consumerGroups": [{"name": GROUP}],
            },
        }
    )
    with local_broker(cluster, Path(tmp_path_factory.mktemp("many"))) as handle:
        yield handle


async def _send_one_per_queue(endpoints: str) -> dict[str, set[str]]:
    """One request of QUEUES messages to each topic (the broker takes a topic's queues
    in turn, message by message), IN_FLIGHT requests at a time: the acknowledged
    message ids by topic."""
    acked: dict[str, set[str]] = {topic: set() for topic in TOPICS}
    slots = asyncio.Semaphore(IN_FLIGHT)
    async with LeanClient(endpoints, timeout=DEADLINE_S) as client:

        async def send(topic: str) -> None:
            batch = [OutgoingMessage(f"{topic}/{n}".encode()) for n in range(QUEUES)]
            async with slots:
                entries = await client.send(topic, batch)
            for entry in entries:
                assert entry.status.code == pb.Code.OK, (topic, entry.status)
                acked[topic].add(entry.message_id)

        await asyncio.gather(*(send(t) for t in TOPICS))
    return acked


async def _receive_every_topic(endpoints: str) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {topic: set() for topic in TOPICS}
    slots = asyncio.Semaphore(IN_FLIGHT)
    async with LeanClient(endpoints, timeout=DEADLINE_S) as client:
        async with asyncio.timeout(READY_S):  # connected: a starved machine may take tries
            await client.wait_ready()

        async def receive(topic: str) -> None:
            async with slots:
                for _ in range(3):  # one receive takes all eight; again if one was slow
                    messages = await client.receive(GROUP, topic, batch=32, poll_ms=1000)
                    got[topic] |= {m.message_id for m in messages}
                    if len(got[topic]) >= QUEUES:
                        return

        await asyncio.gather(*(receive(t) for t in TOPICS))
    return got


def _open_fds(broker: LocalBroker) -> int:
    return len(os.listdir(f"/proc/{broker.process['pid']}/fd"))


def test_every_acknowledged_message_is_served_after_a_restart(broker: LocalBroker) -> None:
    acked = asyncio.run(_send_one_per_queue(broker.endpoints))
    assert sum(map(len, acked.values())) == len(TOPICS) * QUEUES
    assert _open_fds(broker) <= MAX_FDS

    broker.restart()

    assert _open_fds(broker) <= MAX_FDS
    with broker.admin() as admin:
        ours = set(TOPICS)
        queues = [q for q in admin.queues() if q["topic"] in ours]  # not the stats topic
    assert len(queues) == len(TOPICS) * QUEUES
    # A request's messages take the topic's queues in turn: one in every queue.
    other = [(q["topic"], q["queueId"]) for q in queues if q["maxOffset"] - q["minOffset"] != 1]
    assert not other, f"{len(other)} queues hold other than one message, e.g. {other[:5]}"
    try:
        got = asyncio.run(_receive_every_topic(broker.endpoints))
    except TimeoutError:
        log = broker.runtime.directory / "logs" / f"{broker.name}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"no connection to the restarted broker in {READY_S:.0f} s; its log:\n{tail}")
    wrong = {t: (sorted(acked[t]), sorted(got[t])) for t in TOPICS if got[t] != acked[t]}
    example = list(wrong.items())[:2]
    assert not wrong, f"{len(wrong)} topics differ (acked, received), e.g. {example}"
