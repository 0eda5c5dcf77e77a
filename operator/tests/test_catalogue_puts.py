"""The manifest's topics and groups into the catalogue (``put_missing``) against three
real controllers: thousands of entries in a few batch commands, every one in the
catalogue afterwards; nothing put when nothing differs; an invalid entry refuses its
batch with the AdminError the reconciler handles. The RocketTopic/RocketConsumerGroup
handlers' puts, gathered by ``PutBatcher``: thousands at once in a few commands, a
refused entry its own handler's error, unreachable controllers every handler's. Under
the feature gate (orchestrate/compat.py): one put per entry for controllers of the
previous release, and a topic's trace withheld (not put again each tick) until every
member reads it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.api.catalogue import MAX_BATCH_ENTRIES, canonical_spec
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec, TraceMode
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.operator.admin import AdminError, ControllerAdmin
from rocketcluster.operator.catalogue_batch import PutBatcher, put_missing
from rocketcluster.operator.orchestrate.compat import Gate

pytestmark = pytest.mark.slow


TOPICS = [canonical_spec(TopicSpec(name=f"t-{i:04d}", queues=8)) for i in range(2000)]
# A loopback address no local runtime hands out (they take 127.0.x.y).
NOBODY = "127.251.13.7"
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


# -- the RocketTopic / RocketConsumerGroup handlers' puts, batched (catalogue_batch.py) --


async def test_handlers_putting_together_make_a_few_batch_commands(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    """2,500 handlers at once (kopf resuming 2,500 objects): every entry lands, in
    three commands, and each handler gets a version whose catalogue holds its entry."""
    admin, writes = counted
    before = (await _catalogue(admin))["version"]
    batcher = PutBatcher()
    specs = [canonical_spec(TopicSpec(name=f"crd-{i:04d}", queues=4)) for i in range(2300)]
    specs += [canonical_spec(ConsumerGroupSpec(name=f"crd-g-{i:03d}")) for i in range(200)]

    async def handler(spec: dict[str, Any]) -> int:
        collection = "topics" if "queues" in spec else "consumer-groups"
        return await batcher.put(("ns", "puts"), admin, collection, spec)

    versions = await asyncio.gather(*(handler(s) for s in specs))
    after = await _catalogue(admin)
    assert writes == ["/v1/catalogue/entries"] * 3
    assert after["version"] == before + 3
    assert set(versions) <= set(range(before + 1, before + 4))
    topics = {t["name"]: t for t in after["topics"]}
    assert all(topics[s["name"]] == s for s in specs if "queues" in s)
    assert _names(after["consumerGroups"]) >= {s["name"] for s in specs if "queues" not in s}
    assert not batcher._queues  # nothing left behind for the cluster


async def test_a_refused_entry_is_its_own_handlers_error_and_the_others_land(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, _ = counted
    batcher = PutBatcher()
    fine = [canonical_spec(TopicSpec(name=f"lone-{i}", queues=2)) for i in range(30)]
    refused = {**canonical_spec(TopicSpec(name="lone-bad")), "queues": 0}
    outcomes = await asyncio.gather(
        *(batcher.put(("ns", "puts"), admin, "topics", s) for s in [*fine, refused]),
        return_exceptions=True,
    )
    *landed, error = outcomes
    assert isinstance(error, AdminError) and error.status == 422, error
    assert all(isinstance(v, int) and v > 0 for v in landed), landed
    names = _names((await _catalogue(admin))["topics"])
    assert names >= _names(fine) and "lone-bad" not in names


async def test_the_same_entry_twice_before_sending_puts_the_newer(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, writes = counted
    batcher = PutBatcher()
    older = canonical_spec(TopicSpec(name="twice", queues=2))
    newer = canonical_spec(TopicSpec(name="twice", queues=6))
    first, second = await asyncio.gather(
        batcher.put(("ns", "puts"), admin, "topics", older),
        batcher.put(("ns", "puts"), admin, "topics", newer),
    )
    assert first == second
    assert writes == ["/v1/catalogue/entries"]
    topics = {t["name"]: t for t in (await _catalogue(admin))["topics"]}
    assert topics["twice"] == newer


async def test_unreachable_controllers_fail_every_waiting_handler() -> None:
    """Nothing answers: every handler hears the error (kopf retries it), none hangs."""
    async with httpx.AsyncClient() as http:
        admin = ControllerAdmin(http, {1: NOBODY})
        batcher = PutBatcher()
        specs = [canonical_spec(TopicSpec(name=f"nowhere-{i}")) for i in range(20)]
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(batcher.put(("ns", "gone"), admin, "topics", s) for s in specs),
                return_exceptions=True,
            ),
            timeout=60,
        )
    assert all(isinstance(o, AdminError) and o.status == 0 for o in outcomes), outcomes
    assert not batcher._queues


# -- the feature gate (orchestrate/compat.py): batches and trace only once understood --

# Controllers of the previous release: no member reports a feature.
PREVIOUS = Gate(controllers=frozenset(), groups={})


async def test_previous_release_controllers_get_one_put_per_entry(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, writes = counted
    topics = [canonical_spec(TopicSpec(name=f"old-{i}", queues=2)) for i in range(3)]
    groups = [canonical_spec(ConsumerGroupSpec(name="old-g"))]
    await put_missing(
        admin, await _catalogue(admin), topics=topics, groups=groups, features=PREVIOUS
    )
    assert sorted(writes) == sorted(
        [*(f"/v1/topics/old-{i}" for i in range(3)), "/v1/consumer-groups/old-g"]
    )
    after = await _catalogue(admin)
    assert _names(after["topics"]) >= _names(topics) and "old-g" in _names(after["consumerGroups"])

    writes.clear()
    batcher = PutBatcher()
    specs = [canonical_spec(TopicSpec(name=f"old-crd-{i}", queues=2)) for i in range(4)]
    versions = await asyncio.gather(
        *(batcher.put(("ns", "puts"), admin, "topics", s, batch=False) for s in specs)
    )
    assert writes == [f"/v1/topics/old-crd-{i}" for i in range(4)]
    assert all(v > 0 for v in versions)


async def test_a_withheld_trace_is_put_once_without_it_and_whole_once_the_gate_opens(
    counted: tuple[ControllerAdmin, list[str]],
) -> None:
    admin, writes = counted
    traced = canonical_spec(TopicSpec(name="traced", queues=2, trace=TraceMode.ALL))
    brokers_old = Gate(groups={"puts-broker-0": frozenset()})  # controllers new, a group old
    await put_missing(
        admin, await _catalogue(admin), topics=[traced], groups=[], features=brokers_old
    )
    held = {t["name"]: t for t in (await _catalogue(admin))["topics"]}["traced"]
    assert "trace" not in held and writes == ["/v1/catalogue/entries"]
    writes.clear()
    for _ in range(2):  # the next ticks: nothing differs as every member reads it
        await put_missing(
            admin, await _catalogue(admin), topics=[traced], groups=[], features=brokers_old
        )
    assert writes == []
    await put_missing(admin, await _catalogue(admin), topics=[traced], groups=[], features=Gate())
    assert {t["name"]: t for t in (await _catalogue(admin))["topics"]}["traced"] == traced
    assert writes == ["/v1/catalogue/entries"]
