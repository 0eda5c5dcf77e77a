from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec
from rocketcluster.broker.store import InvalidNameError, MetadataStore
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable
from rocketcluster.broker.tiered.catalog import segment_name


def test_topics_groups_and_offsets_survive_reopen(tmp_path: Path) -> None:
    meta = MetadataStore(tmp_path / "meta")
    meta.put_topic(TopicSpec(name="orders", queues=4, messageType=MessageType.FIFO))
    meta.put_group(ConsumerGroupSpec(name="billing", fifo=True, maxDeliveryAttempts=3))
    meta.commit_offset("billing", "orders", 2, 17)
    meta.close()
    meta = MetadataStore(tmp_path / "meta")
    try:
        topic = meta.get_topic("orders")
        assert topic is not None and topic.queues == 4 and topic.message_type is MessageType.FIFO
        group = meta.get_group("billing")
        assert group is not None and group.fifo and group.max_delivery_attempts == 3
        assert meta.get_offset("billing", "orders", 2) == 17
        assert meta.offsets_of_group("billing") == {("orders", 2): 17}
        assert meta.delete_topic("orders") and meta.get_topic("orders") is None
        assert not meta.delete_topic("orders")
        assert meta.delete_group("billing")
        assert meta.get_offset("billing", "orders", 2) is None
    finally:
        meta.close()


def test_invalid_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="topic"):
        TopicSpec(name="bad name")
    with pytest.raises(ValueError, match="consumer group"):
        ConsumerGroupSpec(name="x" * 300)
    meta = MetadataStore(tmp_path / "meta")
    try:
        with pytest.raises(InvalidNameError):
            meta.commit_offset("ok", "bad topic", 0, 1)
        with pytest.raises(ValueError):
            meta.commit_offset("ok", "topic", -1, 1)
        # Specs built around their validators still never become keys.
        with pytest.raises(InvalidNameError):
            meta.put_topic(TopicSpec.model_construct(name="a\x00b", queues=1))
        with pytest.raises(InvalidNameError):
            meta.put_group(ConsumerGroupSpec.model_construct(name="../g"))
        assert meta.list_topics() == [] and meta.list_groups() == []
    finally:
        meta.close()


def test_the_store_takes_a_topic_only_when_it_is_a_safe_name(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path / "cq", 1024)
    for bad in ("..", "../x", "a/b", "a\\b", "t\x00", "t\n", ""):
        with pytest.raises(InvalidNameError):
            table.get_or_create(bad, 0)
    assert table.get_or_create("%RETRY%g", 0).topic == "%RETRY%g"
    assert not (tmp_path / "x").exists()


def test_tier_object_names_refuse_unsafe_topics() -> None:
    assert segment_name("c/g/segments/", "orders", 1, 0).startswith("c/g/segments/orders/1/")
    for bad in ("..", "a/b", "t\x00"):
        with pytest.raises(ValueError, match="cannot name a tier object"):
            segment_name("c/g/segments/", bad, 0, 0)


def test_many_topics_and_groups_are_one_write_all_or_none(tmp_path: Path) -> None:
    """A catalogue of thousands of names is one synced transaction; a bad name in it
    writes none of them."""
    meta = MetadataStore(tmp_path / "meta")
    try:
        topics = [TopicSpec(name=f"t-{i:05d}", queues=8) for i in range(3000)]
        groups = [ConsumerGroupSpec(name=f"g-{i:04d}") for i in range(500)]
        meta.put_topics(topics)
        meta.put_groups(groups)
        bad = TopicSpec.model_construct(name="no spaces", queues=1)
        with pytest.raises(InvalidNameError):
            meta.put_topics([TopicSpec(name="fine", queues=1), bad])
        assert meta.get_topic("fine") is None
        meta.put_topics([])
    finally:
        meta.close()
    meta = MetadataStore(tmp_path / "meta")
    try:
        assert meta.list_topics() == topics and meta.list_groups() == groups
    finally:
        meta.close()
