"""CatalogueService on a real metadata store, fed by a fake catalogue source: what a
new catalogue changes in the registry and the routes, what it never takes away, and
how an outage is lived through."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import BrokerGroupEntry, Catalogue
from rocketcluster.api.client.controller import ControllerClient, ControllerUnavailable
from rocketcluster.api.generated.controller_pb2_grpc import (
    ControllerServiceServicer,
    add_ControllerServiceServicer_to_server,
)
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec
from rocketcluster.broker.messaging.catalogue_sync import CatalogueService
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.messaging.routes import RouteTable
from rocketcluster.broker.store import MetadataStore

GROUP = "c-broker-0"
ME = {GROUP: BrokerGroupEntry(endpoint="10.0.0.1:8081")}


class FakeSource:
    """The controllers as the service sees them: a catalogue, unchanged, or down."""

    def __init__(self) -> None:
        self.catalogue = Catalogue()
        self.down: str | None = None
        self.asked: list[int] = []

    async def get_catalogue(self, known_version: int = 0) -> Catalogue | None:
        self.asked.append(known_version)
        if self.down:
            raise ControllerUnavailable(self.down)
        return None if known_version == self.catalogue.version else self.catalogue

    def publish(self, **changes: object) -> Catalogue:
        data = {**self.catalogue.model_dump(by_alias=True), **changes}
        data["version"] = self.catalogue.version + 1
        self.catalogue = Catalogue.model_validate(data)
        return self.catalogue


def config(tmp_path: Path, **kw: object) -> BrokerProcessConfig:
    settings: dict[str, object] = {"cluster": "c", "group": GROUP, "data_dir": tmp_path}
    settings.update(kw)
    return BrokerProcessConfig.model_validate(settings)


class Broker:
    """The parts of a broker the service touches, reopenable like a restart."""

    def __init__(self, tmp_path: Path, cfg: BrokerProcessConfig, source: FakeSource) -> None:
        self.tmp_path, self.cfg, self.source = tmp_path, cfg, source
        self.installed: list[RouteTable] = []
        self.open()

    def open(self) -> None:
        self.metadata = MetadataStore(self.tmp_path / "metadata")
        self.registry = TopicRegistry(self.metadata, auto_create=False)
        self.registry.apply_declared(self.cfg.topics, self.cfg.consumer_groups)
        self.service = CatalogueService(
            self.cfg, self.registry, self.metadata, self.installed.append, self.source, poll_s=0.05
        )
        self.service.restore()

    def restart(self) -> None:
        self.metadata.close()
        self.open()

    @property
    def routes(self) -> RouteTable:
        return self.installed[-1]


@pytest.fixture
def source() -> FakeSource:
    return FakeSource()


@pytest.fixture
def broker(tmp_path: Path, source: FakeSource) -> Iterator[Broker]:
    handle = Broker(
        tmp_path,
        config(
            tmp_path,
            topics=[TopicSpec(name="boot", queues=2)],
            consumer_groups=[ConsumerGroupSpec(name="boot-readers")],
        ),
        source,
    )
    yield handle
    handle.metadata.close()


def _not_found(registry: TopicRegistry, topic: str) -> int:
    with pytest.raises(MessagingError) as err:
        registry.require_topic(topic)
    return err.value.code


async def test_new_topics_and_groups_are_served_without_a_restart(
    broker: Broker, source: FakeSource
) -> None:
    source.publish(
        topics=[TopicSpec(name="fresh", queues=4, messageType=MessageType.FIFO)],
        consumerGroups=[ConsumerGroupSpec(name="readers", fifo=True)],
        groups=ME,
    )
    assert await broker.service.poll_once()
    assert broker.registry.require_topic("fresh").queues == 4
    assert broker.registry.require_group("readers").fifo
    assert broker.registry.require_topic("boot").queues == 2  # the config's stay
    assert broker.routes.version == 1 and broker.routes.source == "catalogue"
    assert not await broker.service.poll_once()  # unchanged: nothing to do
    assert source.asked == [0, 1]


async def test_a_catalogue_of_thousands_is_served_after_one_poll_and_a_restart(
    broker: Broker, source: FakeSource
) -> None:
    """10,000 topics and 2,000 groups in one catalogue version (written in one
    metadata transaction each, not one per name)."""
    topics = [TopicSpec(name=f"many-{i:05d}", queues=8) for i in range(10_000)]
    groups = [ConsumerGroupSpec(name=f"many-readers-{i:04d}") for i in range(2_000)]
    source.publish(topics=topics, consumerGroups=groups)
    assert await broker.service.poll_once()
    assert broker.registry.require_topic("many-09999").queues == 8
    assert broker.registry.require_group("many-readers-1999")
    broker.restart()
    assert {t.name for t in broker.registry.topics()} >= {t.name for t in topics}
    assert len(broker.registry.groups()) == 2_000 + 1  # and the config's own


def test_a_refused_shrink_among_many_puts_none_of_them(broker: Broker) -> None:
    with pytest.raises(MessagingError, match="shrinking"):
        broker.registry.put_topics(
            [TopicSpec(name="new-one", queues=4), TopicSpec(name="boot", queues=1)]
        )
    assert broker.registry.get_topic("new-one") is None
    assert broker.metadata.get_topic("new-one") is None
    assert broker.registry.require_topic("boot").queues == 2


async def test_queue_counts_grow_but_never_shrink(
    broker: Broker, source: FakeSource, caplog: pytest.LogCaptureFixture
) -> None:
    source.publish(topics=[TopicSpec(name="t", queues=4)])
    await broker.service.poll_once()
    source.publish(topics=[TopicSpec(name="t", queues=8, messageType=MessageType.MIXED)])
    await broker.service.poll_once()
    assert broker.registry.require_topic("t") == TopicSpec(
        name="t", queues=8, messageType=MessageType.MIXED
    )
    caplog.set_level(logging.INFO, "rocketcluster.broker.messaging.catalogue_sync")
    for _ in range(3):  # asked to shrink in three versions: refused, said once
        source.publish(topics=[TopicSpec(name="t", queues=2)], consumerGroups=[], groups=dict(ME))
        await broker.service.poll_once()
    assert broker.registry.require_topic("t").queues == 8
    refusals = [r for r in caplog.messages if "keeping 8 queues, not 2" in r]
    assert len(refusals) == 1, caplog.messages


async def test_dropped_names_are_retired_not_deleted_and_come_back_whole(
    broker: Broker, source: FakeSource
) -> None:
    source.publish(
        topics=[TopicSpec(name="t", queues=4), TopicSpec(name="boot", queues=2)],
        consumerGroups=[ConsumerGroupSpec(name="g"), ConsumerGroupSpec(name="boot-readers")],
    )
    await broker.service.poll_once()
    broker.metadata.commit_offset("g", "t", 3, 42)
    source.publish(topics=[], consumerGroups=[])
    await broker.service.poll_once()
    assert _not_found(broker.registry, "t") == Code.TOPIC_NOT_FOUND
    with pytest.raises(MessagingError):
        broker.registry.require_group("g")
    # the config is the bootstrap: its names stay served whatever the catalogue says
    assert broker.registry.require_topic("boot") and broker.registry.require_group("boot-readers")
    # kept: the spec (so a smaller count cannot strand queue 3) and the group's offsets
    assert broker.metadata.get_topic("t") == TopicSpec(name="t", queues=4)
    assert broker.metadata.get_offset("g", "t", 3) == 42
    assert broker.service.status()["retiredTopics"] == ["t"]

    broker.restart()  # retirement survives a restart (no window serving "t" again)
    assert _not_found(broker.registry, "t") == Code.TOPIC_NOT_FOUND

    source.publish(topics=[TopicSpec(name="t", queues=2)], consumerGroups=[{"name": "g"}])
    await broker.service.poll_once()
    assert broker.registry.require_topic("t").queues == 4
    assert broker.registry.require_group("g").name == "g"
    assert broker.metadata.get_offset("g", "t", 3) == 42


async def test_a_name_the_config_held_is_retired_once_the_config_lets_go(
    broker: Broker, source: FakeSource
) -> None:
    source.publish(topics=[TopicSpec(name="boot", queues=2)])
    await broker.service.poll_once()
    source.publish(topics=[])
    await broker.service.poll_once()
    assert broker.registry.require_topic("boot")  # the config still declares it
    broker.cfg = config(broker.tmp_path)  # a newer config file without it, then a restart
    broker.restart()
    assert _not_found(broker.registry, "boot") == Code.TOPIC_NOT_FOUND
    assert broker.registry.require_group("boot-readers")  # never in the catalogue: kept


async def test_names_the_catalogue_never_listed_are_not_its_to_take(
    broker: Broker, source: FakeSource
) -> None:
    broker.registry.put_topic(TopicSpec(name="by-admin", queues=1))
    source.publish(topics=[TopicSpec(name="t")])
    await broker.service.poll_once()
    source.publish(topics=[])
    await broker.service.poll_once()
    assert broker.registry.require_topic("by-admin")


async def test_a_slave_adopting_its_master_never_revives_a_retired_name(
    broker: Broker, source: FakeSource
) -> None:
    source.publish(topics=[TopicSpec(name="t")])
    await broker.service.poll_once()
    source.publish(topics=[])
    await broker.service.poll_once()
    broker.registry.apply_declared([TopicSpec(name="t")], [], revive=False)  # master lags
    assert _not_found(broker.registry, "t") == Code.TOPIC_NOT_FOUND


async def test_a_restart_serves_the_saved_catalogue_over_the_config(
    tmp_path: Path, source: FakeSource
) -> None:
    cfg = config(tmp_path, topics=[TopicSpec(name="boot", queues=2)])
    broker = Broker(tmp_path, cfg, source)
    try:
        source.publish(
            topics=[TopicSpec(name="boot", queues=6, messageType=MessageType.MIXED)],
            groups={**ME, "c-broker-1": BrokerGroupEntry(endpoint="b:8081", writable=False)},
        )
        await broker.service.poll_once()
        source.down = "UNAVAILABLE"
        broker.restart()  # the config still says 2 queues, NORMAL: no crash, no shrink
        assert broker.registry.require_topic("boot").queues == 6
        assert broker.registry.require_topic("boot").message_type is MessageType.MIXED
        assert broker.routes.version == 1
        assert broker.routes.permission("c-broker-1") == pb.Permission.READ
        assert not await broker.service.poll_once()
        assert source.asked[-1] == 1  # it asks for newer than what it saved
    finally:
        broker.metadata.close()


async def test_routes_follow_groups_and_the_write_flag(
    broker: Broker, source: FakeSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "rocketcluster.broker.messaging.catalogue_sync")
    source.publish(groups=ME)
    await broker.service.poll_once()
    source.publish(groups={**ME, "c-broker-1": BrokerGroupEntry(endpoint="b:8081")})
    await broker.service.poll_once()
    assert broker.routes.endpoints() == {GROUP: "10.0.0.1:8081", "c-broker-1": "b:8081"}
    source.publish(groups={GROUP: BrokerGroupEntry(endpoint="10.0.0.1:8081", writable=False)})
    await broker.service.poll_once()
    assert broker.routes.endpoints() == {GROUP: "10.0.0.1:8081"}  # c-broker-1 forgotten
    assert not broker.routes.writable and broker.routes.write_refusal
    text = "\n".join(caplog.messages)
    assert "broker group c-broker-1 added to routes at b:8081" in text
    assert "broker group c-broker-1 removed from routes" in text
    assert "this group is write-disabled" in text


async def test_an_outage_keeps_the_last_catalogue_and_is_logged_once(
    broker: Broker, source: FakeSource, caplog: pytest.LogCaptureFixture
) -> None:
    source.publish(topics=[TopicSpec(name="t")], groups=ME)
    broker.service.start()
    try:
        await _until(lambda: broker.service.applied is not None)
        caplog.set_level(logging.INFO, "rocketcluster.broker.messaging.catalogue_sync")
        source.down = "no controller leader answered (x: UNIMPLEMENTED)"
        await _until(lambda: len(source.asked) >= 6)
        assert broker.registry.require_topic("t")
        assert broker.routes.version == 1
        source.down = None
        source.publish(topics=[TopicSpec(name="t"), TopicSpec(name="u")])
        await _until(lambda: broker.registry.get_topic("u") is not None)
        await _until(lambda: len(source.asked) >= 12)  # quiet polls: nothing logged
    finally:
        await broker.service.stop()
    assert [m for m in caplog.messages if "unavailable" in m] == [
        "catalogue: controllers unavailable (no controller leader answered (x: UNIMPLEMENTED));"
        " serving catalogue v1, retrying every 0.1s"
    ]
    assert sum("answer again" in m for m in caplog.messages) == 1
    assert [m for m in caplog.messages if m.startswith("catalogue v2")] == [
        "catalogue v2: topic u added (8 queues, NORMAL)"
    ]


async def _until(probe: Callable[[], object]) -> None:
    async with asyncio.timeout(10):
        while not probe():  # noqa: ASYNC110 (polling state the code under test changes)
            await asyncio.sleep(0.01)


async def test_controllers_without_get_catalogue_are_an_outage(broker: Broker) -> None:
    """Controllers from before the catalogue answer UNIMPLEMENTED: the broker serves
    its config (or last catalogue) and keeps asking."""
    server = grpc.aio.server()
    add_ControllerServiceServicer_to_server(ControllerServiceServicer(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = ControllerClient([f"127.0.0.1:{port}"], timeout=2.0, attempts=2)
    try:
        service = CatalogueService(
            broker.cfg, broker.registry, broker.metadata, broker.installed.append, client
        )
        service.restore()
        assert not await service.poll_once()
        assert service.outage is not None and "UNIMPLEMENTED" in service.outage
        assert broker.registry.require_topic("boot")
        assert broker.routes.source == "config"
    finally:
        await client.close()
        await server.stop(0)
