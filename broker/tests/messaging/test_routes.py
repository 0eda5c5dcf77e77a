"""RouteTable: which groups QueryRoute offers, with which permission, in which order."""

from __future__ import annotations

from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import BrokerGroupEntry, Catalogue
from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.routes import RouteTable

TOPIC = TopicSpec(name="orders", queues=3)


def config(**kw: object) -> BrokerProcessConfig:
    settings: dict[str, object] = {
        "cluster": "c",
        "group": "c-broker-0",
        "data_dir": Path("/tmp/unused"),
        "group_endpoint": "10.0.0.1:8081",
    }
    settings.update(kw)
    return BrokerProcessConfig.model_validate(settings)


def catalogue(**groups: BrokerGroupEntry) -> Catalogue:
    return Catalogue(version=4, groups={k.replace("_", "-"): v for k, v in groups.items()})


def test_config_routes_until_a_catalogue_names_groups() -> None:
    table = RouteTable.from_config(config())
    assert table.endpoints() == {"c-broker-0": "10.0.0.1:8081"}
    assert table.writable and table.write_refusal is None and table.source == "config"
    two = RouteTable.from_config(
        config(route_groups={"c-broker-0": "a:8081", "c-broker-1": "b.svc:8081"})
    )
    assert two.endpoints() == {"c-broker-0": "a:8081", "c-broker-1": "b.svc:8081"}
    assert two.broker("c-broker-1").endpoints.scheme == pb.AddressScheme.DOMAIN_NAME


def test_catalogue_groups_with_an_endpoint_are_the_routes() -> None:
    table = RouteTable.from_catalogue(
        config(route_groups={"c-broker-0": "old:8081", "c-broker-9": "gone:8081"}),
        catalogue(
            c_broker_0=BrokerGroupEntry(endpoint="10.0.0.1:8081"),
            c_broker_1=BrokerGroupEntry(endpoint="10.0.0.2:8081", writable=False),
            c_broker_2=BrokerGroupEntry(),  # no endpoint yet, none in the config: left out
        ),
    )
    assert table.source == "catalogue" and table.version == 4
    assert table.endpoints() == {"c-broker-0": "10.0.0.1:8081", "c-broker-1": "10.0.0.2:8081"}
    assert table.permission("c-broker-0") == pb.Permission.READ_WRITE
    assert table.permission("c-broker-1") == pb.Permission.READ
    assert table.writable  # this broker is c-broker-0


def test_a_group_still_registering_keeps_its_queues_at_the_config_endpoint() -> None:
    """The first group registered must not make the route one group's: a FIFO
    producer's hash over the queue count would move message groups at its refresh."""
    two = config(route_groups={"c-broker-0": "a:8081", "c-broker-1": "b:8081"})
    registering = RouteTable.from_catalogue(
        two,
        catalogue(
            c_broker_0=BrokerGroupEntry(endpoint="10.0.0.1:8081"),
            c_broker_1=BrokerGroupEntry(),
        ),
    )
    assert registering.endpoints() == {"c-broker-0": "10.0.0.1:8081", "c-broker-1": "b:8081"}
    before = RouteTable.from_config(two).message_queues(TOPIC, "", [])
    after = registering.message_queues(TOPIC, "", [])
    assert [(q.broker.name, q.id) for q in before] == [(q.broker.name, q.id) for q in after]


def test_no_endpoint_in_the_catalogue_keeps_the_config_routes_with_its_flags() -> None:
    table = RouteTable.from_catalogue(
        config(route_groups={"c-broker-0": "a:8081", "c-broker-1": "b:8081"}),
        catalogue(c_broker_1=BrokerGroupEntry(writable=False)),
    )
    assert table.source == "config"
    assert table.endpoints() == {"c-broker-0": "a:8081", "c-broker-1": "b:8081"}
    assert table.permission("c-broker-1") == pb.Permission.READ


def test_a_write_disabled_group_refuses_sends_in_rocketmq_words() -> None:
    table = RouteTable.from_catalogue(
        config(), catalogue(c_broker_0=BrokerGroupEntry(endpoint="a:8081", writable=False))
    )
    assert not table.writable
    assert table.write_refusal is not None
    assert "the broker[c-broker-0] sending message is forbidden" in table.write_refusal
    # the flag stays while the entry is missing (a forgotten group does not take writes
    # back); a fresh broker without an entry takes writes
    later = RouteTable.from_catalogue(config(), Catalogue(version=5), own_writable=table.writable)
    assert not later.writable
    assert RouteTable.from_catalogue(config(), Catalogue(version=5)).writable


def test_queues_are_listed_queue_major_so_a_retry_moves_to_another_group() -> None:
    table = RouteTable.from_catalogue(
        config(),
        catalogue(
            c_broker_1=BrokerGroupEntry(endpoint="b:8081", writable=False),
            c_broker_0=BrokerGroupEntry(endpoint="a:8081"),
        ),
    )
    queues = table.message_queues(TOPIC, "ns", [int(pb.MessageType.NORMAL)])
    assert [(q.broker.name, q.id) for q in queues] == [
        ("c-broker-0", 0),
        ("c-broker-1", 0),
        ("c-broker-0", 1),
        ("c-broker-1", 1),
        ("c-broker-0", 2),
        ("c-broker-1", 2),
    ]
    assert {q.broker.name for q in queues if q.permission == pb.Permission.READ} == {"c-broker-1"}
    assert all(q.topic.resource_namespace == "ns" and q.broker.id == 0 for q in queues)
