"""The catalogue in the replicated state machine: every command, its validation, the
version rules, the history, and snapshots (including ones written before it existed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rocketcluster.api.catalogue import Catalogue
from rocketcluster.controller.state import ControllerCode, ReplicasState, Result


class Machine:
    def __init__(self) -> None:
        self.state = ReplicasState()
        self.index = 0

    def do(self, **command: Any) -> Result:
        self.index += 1
        return self.state.apply(self.index, command, time_ms=1000 + self.index)

    @property
    def version(self) -> int:
        return self.state.catalogue_version

    def catalogue(self) -> Catalogue:
        return Catalogue.model_validate(self.state.catalogue())

    def register(self, group: str, broker_id: int = 1, endpoint: str = "") -> None:
        applied = self.do(
            type="ApplyBrokerId",
            cluster="c",
            group=group,
            brokerId=broker_id,
            address=f"10.0.0.{broker_id}:10911",
            checkCode=f"{group}-{broker_id}",
        )
        assert applied.ok, applied
        command: dict[str, Any] = {
            "type": "RegisterBroker",
            "group": group,
            "brokerId": broker_id,
            "address": f"10.0.0.{broker_id}:10911",
        }
        if endpoint:
            command["clientEndpoint"] = endpoint
        registered = self.do(**command)
        assert registered.ok, registered


def topic(name: str = "orders", **spec: Any) -> dict[str, Any]:
    return {"name": name, **spec}


def test_an_empty_catalogue_is_version_zero_and_valid() -> None:
    m = Machine()
    assert m.catalogue() == Catalogue()
    assert m.state.catalogue() == {"version": 0, "topics": [], "consumerGroups": [], "groups": {}}


def test_put_topic_stores_the_canonical_spec_and_bumps_the_version() -> None:
    m = Machine()
    created = m.do(type="PutTopic", spec=topic(queues=4))
    assert created.ok and created.message == "topic orders created"
    assert created.data["version"] == 1 == m.version
    assert m.state.topics["orders"] == {"name": "orders", "queues": 4, "messageType": "NORMAL"}
    updated = m.do(type="PutTopic", spec=topic(queues=4, messageType="FIFO"))
    assert updated.ok and updated.message == "topic orders updated" and m.version == 2
    assert m.catalogue().topic("orders") is not None
    assert m.catalogue().topic("orders").message_type == "FIFO"  # type: ignore[union-attr]


def test_an_unchanged_put_changes_neither_the_version_nor_the_history() -> None:
    m = Machine()
    assert m.do(type="PutTopic", spec=topic(queues=8)).ok
    assert m.do(type="PutConsumerGroup", spec={"name": "billing"}).ok
    version, events = m.version, len(m.state.history)
    # Defaults written out or left out are the same spec.
    same = m.do(type="PutTopic", spec=topic(queues=8, messageType="NORMAL"))
    assert same.ok and same.data == {"changed": False, "version": version}
    assert m.do(type="PutTopic", spec=topic()).data["changed"] is False
    again = m.do(type="PutConsumerGroup", spec={"name": "billing", "maxDeliveryAttempts": 16})
    assert again.ok and again.data["changed"] is False
    assert (m.version, len(m.state.history)) == (version, events)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (topic("bad name"), "only letters, digits"),
        (topic(""), "the name is empty"),
        (topic(queues=0), "queues: Input should be greater than or equal to 1"),
        (topic(queues=1025), "queues: Input should be less than or equal to 1024"),
        (topic(messageType="BULK"), "messageType: Input should be"),
        (topic(partitions=3), "partitions: unknown field (the fields are name, queues"),
        ({"queues": 3}, "name: Field required"),
        (None, "Input should be a valid dictionary"),
    ],
)
def test_invalid_topics_are_refused_without_a_trace(spec: Any, problem: str) -> None:
    m = Machine()
    refused = m.do(type="PutTopic", spec=spec)
    assert refused.code is ControllerCode.CONTROLLER_INVALID_REQUEST
    assert refused.message.startswith("invalid topic: ") and problem in refused.message
    assert (m.version, m.state.topics, m.state.history) == (0, {}, [])


def test_consumer_groups_are_validated_and_deleted_like_topics() -> None:
    m = Machine()
    bad = m.do(type="PutConsumerGroup", spec={"name": "g", "maxDeliveryAttempts": 0})
    assert bad.code is ControllerCode.CONTROLLER_INVALID_REQUEST
    assert "maxDeliveryAttempts: Input should be greater than or equal to 1" in bad.message
    assert m.do(type="PutConsumerGroup", spec={"name": "billing", "fifo": True}).ok
    assert m.catalogue().consumer_group("billing") is not None
    assert m.catalogue().consumer_group("billing").fifo  # type: ignore[union-attr]
    deleted = m.do(type="DeleteConsumerGroup", name="billing")
    assert deleted.ok and m.version == 2 and m.state.consumer_groups == {}
    absent = m.do(type="DeleteConsumerGroup", name="billing")
    assert absent.code is ControllerCode.CONTROLLER_NOT_FOUND
    assert "no consumer group 'billing'" in absent.message and m.version == 2


def test_delete_topic_and_an_absent_topic() -> None:
    m = Machine()
    m.do(type="PutTopic", spec=topic("a"))
    m.do(type="PutTopic", spec=topic("b"))
    assert m.do(type="DeleteTopic", name="a").ok and m.version == 3
    assert [t.name for t in m.catalogue().topics] == ["b"]
    absent = m.do(type="DeleteTopic", name="a")
    assert absent.code is ControllerCode.CONTROLLER_NOT_FOUND and m.version == 3


def test_topics_and_groups_are_listed_by_name() -> None:
    m = Machine()
    for name in ("zeta", "alpha", "mid"):
        m.do(type="PutTopic", spec=topic(name))
        m.do(type="PutConsumerGroup", spec={"name": name})
    catalogue = m.catalogue()
    assert [t.name for t in catalogue.topics] == ["alpha", "mid", "zeta"]
    assert [g.name for g in catalogue.consumer_groups] == ["alpha", "mid", "zeta"]


def test_registered_groups_appear_and_register_broker_sets_the_endpoint() -> None:
    m = Machine()
    m.register("g0")  # no endpoint given: still listed
    assert m.version == 1
    assert m.state.catalogue()["groups"] == {"g0": {"endpoint": "", "writable": True}}
    m.register("g1", endpoint="g1.svc:8081")
    assert m.version == 3  # the new group, then its endpoint
    assert m.catalogue().groups["g1"].endpoint == "g1.svc:8081"
    # Every replica registers the same endpoint: no change after the first.
    m.register("g1", broker_id=2, endpoint="g1.svc:8081")
    assert m.version == 3
    again = m.do(type="RegisterBroker", group="g1", brokerId=1, address="x:1", clientEndpoint="")
    assert again.ok and m.catalogue().groups["g1"].endpoint == "g1.svc:8081"  # kept
    moved = m.do(type="RegisterBroker", group="g1", brokerId=1, address="x:1", clientEndpoint="n:1")
    assert moved.ok and m.version == 4 and m.catalogue().groups["g1"].endpoint == "n:1"


def test_set_group_writable() -> None:
    m = Machine()
    m.register("g", endpoint="g:8081")
    version = m.version
    drained = m.do(type="SetGroupWritable", group="g", writable=False)
    assert drained.ok and drained.message == "broker group g is read-only"
    assert m.version == version + 1
    assert m.catalogue().groups["g"].model_dump() == {"endpoint": "g:8081", "writable": False}
    events = len(m.state.history)
    same = m.do(type="SetGroupWritable", group="g", writable=False)
    assert same.ok and same.data["changed"] is False
    assert (m.version, len(m.state.history)) == (version + 1, events)
    assert m.do(type="SetGroupWritable", group="g", writable=True).ok
    assert m.catalogue().groups["g"].writable and m.version == version + 2
    unknown = m.do(type="SetGroupWritable", group="nope", writable=False)
    assert unknown.code is ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert "no broker group 'nope'" in unknown.message
    not_bool = m.do(type="SetGroupWritable", group="g", writable="no")
    assert not_bool.code is ControllerCode.CONTROLLER_INVALID_REQUEST
    assert m.version == version + 2 and "nope" not in m.state.group_entries


def test_forget_group_removes_replica_info_and_the_catalogue_entry() -> None:
    m = Machine()
    m.register("g0", endpoint="g0:8081")
    m.register("g1", endpoint="g1:8081")
    m.do(type="SetGroupWritable", group="g1", writable=False)
    version = m.version
    forgotten = m.do(type="ForgetGroup", group="g1", reason="scaled in")
    assert forgotten.ok and m.version == version + 1
    assert "g1" not in m.state.groups and "g1" not in m.state.group_entries
    assert list(m.catalogue().groups) == ["g0"]
    again = m.do(type="ForgetGroup", group="g1")
    assert again.code is ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert m.version == version + 1
    # The name can be used again: a new group starts from broker id 1, writable.
    m.register("g1")
    assert m.catalogue().groups["g1"].model_dump() == {"endpoint": "", "writable": True}


def test_every_catalogue_change_is_in_the_history() -> None:
    m = Machine()
    m.register("g", endpoint="g:8081")
    m.do(type="PutTopic", spec=topic())
    m.do(type="PutConsumerGroup", spec={"name": "billing"})
    m.do(type="SetGroupWritable", group="g", writable=False)
    m.do(type="DeleteTopic", name="orders")
    m.do(type="DeleteConsumerGroup", name="billing")
    m.do(type="ForgetGroup", group="g", reason="scaled in")
    m.do(type="DeleteTopic", name="orders")  # refused: not recorded
    commands = [e["command"] for e in m.state.history]
    assert commands == [
        "ApplyBrokerId",
        "RegisterBroker",
        "PutTopic",
        "PutConsumerGroup",
        "SetGroupWritable",
        "DeleteTopic",
        "DeleteConsumerGroup",
        "ForgetGroup",
    ]
    put = m.state.history[2]
    assert put["group"] == "" and put["detail"]["spec"]["name"] == "orders"
    assert m.state.history[-1]["group"] == "g" and m.state.history[-1]["reason"] == "scaled in"
    assert [e["command"] for e in m.state.events_since(0, "g")] == [
        "ApplyBrokerId",
        "RegisterBroker",
        "SetGroupWritable",
        "ForgetGroup",
    ]


def test_routes_stay_apart_from_the_catalogue() -> None:
    m = Machine()
    assert m.do(type="PutRoute", topic="t", queues=4).ok
    assert m.version == 0 and m.state.topics == {}


def filled() -> Machine:
    m = Machine()
    m.register("g0", endpoint="g0:8081")
    m.register("g1")
    m.do(type="SetGroupWritable", group="g1", writable=False)
    m.do(type="PutTopic", spec=topic("orders", queues=4, messageType="FIFO"))
    m.do(type="PutConsumerGroup", spec={"name": "billing", "fifo": True})
    m.do(type="PutRoute", topic="t", queues=2)
    return m


def test_snapshot_round_trip_keeps_everything() -> None:
    m = filled()
    restored = ReplicasState.restore(m.state.snapshot())
    assert restored.catalogue() == m.state.catalogue()
    assert restored.catalogue_version == m.version
    assert restored.routes == m.state.routes and restored.history == m.state.history
    assert {n: g.view() for n, g in restored.groups.items()} == {
        n: g.view() for n, g in m.state.groups.items()
    }
    assert restored.snapshot() == m.state.snapshot()
    # The restored machine goes on from the same version.
    restored.apply(m.index + 1, {"type": "DeleteTopic", "name": "orders"}, 0)
    assert restored.catalogue_version == m.version + 1


def test_a_snapshot_written_before_the_catalogue_restores_with_an_empty_one() -> None:
    m = filled()
    old = json.loads(m.state.snapshot())
    del old["catalogue"]  # what the previous code wrote
    restored = ReplicasState.restore(json.dumps(old).encode())
    assert restored.topics == {} and restored.consumer_groups == {}
    assert restored.group_entries == {}
    # The version a replay of the old log reaches: one change per group it added.
    assert restored.catalogue_version == 2
    assert Catalogue.model_validate(restored.catalogue()).groups.keys() == {"g0", "g1"}
    assert restored.routes == m.state.routes

    replayed = Machine()  # the same old log, replayed by this code from index 1
    replayed.register("g0")
    replayed.register("g1")
    assert replayed.version == restored.catalogue_version


def test_a_batch_of_entries_is_one_version_and_one_short_event() -> None:
    m = Machine()
    assert m.do(type="PutTopic", spec=topic("kept", queues=2)).ok
    version, events = m.version, len(m.state.history)
    topics = [topic(f"t{i}", queues=4) for i in range(500)] + [topic("kept", queues=2)]
    groups = [{"name": f"g{i}"} for i in range(100)]
    put = m.do(type="PutCatalogueEntries", topics=topics, consumerGroups=groups)
    assert put.ok and put.data == {"changed": True, "entries": 600, "version": version + 1}
    assert m.version == version + 1 and len(m.state.topics) == 501
    assert m.state.consumer_groups["g99"] == {
        "name": "g99",
        "fifo": False,
        "maxDeliveryAttempts": 16,
    }
    [event] = m.state.history[events:]
    assert event["command"] == "PutCatalogueEntries"
    assert event["detail"] == {"topics": 501, "consumerGroups": 100}  # counts, not specs
    again = m.do(type="PutCatalogueEntries", topics=topics, consumerGroups=groups)
    assert again.ok and again.data["changed"] is False and m.version == version + 1


def test_one_invalid_entry_refuses_the_whole_batch() -> None:
    m = Machine()
    refused = m.do(
        type="PutCatalogueEntries",
        topics=[topic("fine", queues=2), topic("bad name")],
        consumerGroups=[{"name": "readers"}],
    )
    assert refused.code is ControllerCode.CONTROLLER_INVALID_REQUEST
    assert "only letters, digits" in refused.message
    assert m.state.topics == {} and m.state.consumer_groups == {} and m.version == 0
