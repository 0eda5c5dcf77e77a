"""The manifest's topics and groups into the catalogue (``put_missing``) against three
real controllers: thousands of entries in a few batch commands, every one in the
catalogue afterwards; nothing put when nothing differs; an invalid entry refuses its
batch with the AdminError the reconciler handles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.api.catalogue import MAX_BATCH_ENTRIES, canonical_spec
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.operator.admin import AdminError, ControllerAdmin
from rocketcluster.operator.reconcile import put_missing

pytestmark = pytest.mark.slow


TOPICS = [canonical_spec(TopicSpec(name=f"t-{i:04d}", queues=8)) for i in range(2000)]
GROUPS = [canonical_spec(ConsumerGroupSpec(name=f"g-{i:03d}")) for i in range(200)]


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, str]]:
    """Three controllers, stopped by pid after."""
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "puts"},
            "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 0}},
        }
    )
    runtime = LocalRuntime(Path(tmp_path_factory.mktemp("puts")))
    state = runtime.up(cluster)
    try:
        controllers = [p for p in state["processes"] if p["role"] == "controller"]
        yield {i + 1: p["host"] for i, p in enumerate(sorted(controllers, key=lambda p: p["name"]))}
    finally:
        runtime.down()


@pytest.fixture
async def counted(members: dict[int, str]) -> AsyncIterator[tuple[ControllerAdmin, list[str]]]:
    """The operator's controller client, and the paths of the writes it sent."""
    writes: list[str] = []

    async def count(request: httpx.Request) -> None:
        if request.method != "GET":
            writes.append(request.url.path)

    async with httpx.AsyncClient(event_hooks={"request": [count]}) as http:
        yield ControllerAdmin(http, members), writes


async def _catalogue(admin: ControllerAdmin) -> dict[str, Any]:
    found = await admin.catalogue()
    assert found is not None
    return found


def _names(entries: list[dict[str, Any]]) -> set[str]:
    return {e["name"] for e in entries}


async def test_thousands_of_entries_land_and_an_unchanged_manifest_puts_nothing(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, writes = counted
    before = await _catalogue(admin)
    await put_missing(admin, before, topics=TOPICS, groups=GROUPS)
    after = await _catalogue(admin)
    assert _names(after["topics"]) >= _names(TOPICS)
    assert _names(after["consumerGroups"]) >= _names(GROUPS)
    entries = len(TOPICS) + len(GROUPS)
    assert writes == ["/v1/catalogue/entries"] * -(-entries // MAX_BATCH_ENTRIES)
    assert after["version"] == before["version"] + len(writes)  # once a batch

    writes.clear()
    await put_missing(admin, after, topics=TOPICS, groups=GROUPS)
    assert writes == []


async def test_an_invalid_entry_refuses_its_batch_with_the_admin_error(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, _ = counted
    fine = [canonical_spec(TopicSpec(name=f"ok-{i}", queues=2)) for i in range(40)]
    refused = {**canonical_spec(TopicSpec(name="bad")), "queues": 0}  # no queues
    with pytest.raises(AdminError) as raised:
        await put_missing(admin, await _catalogue(admin), topics=[*fine, refused], groups=[])
    assert raised.value.status == 422 and "queues" in str(raised.value.detail)
    names = _names((await _catalogue(admin))["topics"])
    assert "bad" not in names and "ok-0" not in names  # all or none
