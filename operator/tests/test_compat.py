"""The feature gate (orchestrate/compat.py): what members report, how the gate opens
and closes across a roll from the previous release (whose members answer without a
``features`` list), and what it changes — a topic's ``trace`` withheld from the
catalogue, a number of front processes withheld from a group's render. The batch or
per-entry puts against real controllers are in test_catalogue_puts.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.catalogue import canonical_spec
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.features import RELEASE, SUPPORTED, Feature, advertised, reported
from rocketcluster.api.status import RocketClusterStatus
from rocketcluster.api.topics import TopicSpec, TraceMode
from rocketcluster.operator.orchestrate.compat import (
    Gate,
    Reports,
    gate,
    persisted,
    understood,
    withheld,
)
from rocketcluster.operator.render import RenderContext, render_cluster

REPO = Path(__file__).resolve().parents[2]
G0, G1 = "prod-broker-0", "prod-broker-1"

# What members answer: this release, and the previous one (no ``features`` at all).
NEW = reported({"leader": 1, **advertised()})
OLD = reported({"leader": 1, "raft": {"term": 3}})
GONE = None  # no answer: restarting, being replaced


def _reports(controllers: tuple[Any, ...], **groups: tuple[Any, ...]) -> Reports:
    return Reports(
        controllers=controllers, groups={k.replace("_", "-"): v for k, v in groups.items()}
    )


def test_a_member_of_the_previous_release_reports_nothing() -> None:
    assert isinstance(OLD, frozenset) and not OLD
    assert NEW == SUPPORTED == frozenset(Feature)
    assert advertised()["release"] == RELEASE and RELEASE
    assert reported({"features": "catalogue-batch"}) == frozenset()  # not a list: nothing


def test_a_new_cluster_is_open_before_any_pod_and_stays_open_when_pods_start() -> None:
    first = gate(Reports((), {G0: ()}), None)  # no pod yet: they run the desired image
    assert first.catalogue_batch and first.topic_trace and first.front_processes(G0)
    starting = gate(Reports((GONE, GONE, GONE), {G0: (GONE, GONE)}), first)
    assert starting == first  # pods that do not answer yet change nothing
    running = gate(Reports((NEW, NEW, NEW), {G0: (NEW, NEW)}), starting)
    assert running == first


def test_without_a_kept_gate_a_member_that_does_not_answer_keeps_features_closed() -> None:
    found = gate(Reports((NEW, NEW, GONE), {G0: (NEW,)}), None)
    assert not found.catalogue_batch and not found.topic_trace
    assert found.front_processes(G0)


def test_a_roll_from_the_previous_release_opens_each_feature_once_and_never_flaps() -> None:
    """Three controllers, then a group of two, each replaced in turn (a gap with no
    answer, then the new code): catalogue-batch opens only when the last controller
    answers on new code; topic-trace only when every broker does too; nothing that
    opened closes again, whatever does not answer."""
    ctl: list[Any] = [OLD, OLD, OLD]
    brokers: list[Any] = [OLD, OLD]
    kept = gate(_reports(tuple(ctl), prod_broker_0=tuple(brokers)), None)
    assert kept.controllers == frozenset() and not kept.front_processes(G0)
    history = []
    for parts, index in [(ctl, 0), (ctl, 1), (ctl, 2), (brokers, 0), (brokers, 1)]:
        for state in (GONE, NEW, GONE, NEW):  # a restart that answers late once
            parts[index] = state
            kept = gate(_reports(tuple(ctl), prod_broker_0=tuple(brokers)), kept)
            history.append((list(ctl), list(brokers), kept))
    for ctl_now, brokers_now, g in history:
        every_controller_new = all(c == NEW for c in ctl_now)
        seen_all_new = every_controller_new or g.catalogue_batch
        assert g.catalogue_batch == seen_all_new
        if g.catalogue_batch:
            assert OLD not in ctl_now  # never while a member on the previous release answers
        if g.topic_trace:
            assert OLD not in ctl_now and OLD not in brokers_now
        if g.front_processes(G0):
            assert OLD not in brokers_now
    opened = [i for i, (_, _, g) in enumerate(history) if g.catalogue_batch]
    assert opened == list(range(opened[0], len(history)))  # open from then on: no flap
    assert opened[0] == 9  # the third controller's first answer on new code
    final = history[-1][2]
    assert final.topic_trace and final.front_processes(G0) and final.controllers == SUPPORTED


def test_a_member_that_answers_without_a_feature_closes_it_and_gaps_do_not_reopen() -> None:
    open_gate = gate(_reports((NEW, NEW, NEW), prod_broker_0=(NEW, NEW)), None)
    downgraded = gate(_reports((NEW, OLD, NEW), prod_broker_0=(NEW, NEW)), open_gate)
    assert not downgraded.catalogue_batch and not downgraded.topic_trace
    assert downgraded.front_processes(G0)  # the brokers still all have it
    gap = gate(_reports((NEW, GONE, NEW), prod_broker_0=(NEW, GONE)), downgraded)
    assert gap == downgraded


def test_one_group_on_the_previous_release_holds_trace_and_its_own_front_processes() -> None:
    found = gate(
        _reports((NEW, NEW, NEW), prod_broker_0=(NEW, NEW, NEW), prod_broker_1=(OLD, NEW, NEW)),
        None,
    )
    assert found.catalogue_batch
    assert not found.topic_trace  # every broker reads the whole catalogue
    assert found.front_processes(G0) and not found.front_processes(G1)
    assert found.front_processes("prod-broker-7")  # a group with no pod yet


def test_the_gate_round_trips_through_the_status_schema() -> None:
    found = gate(_reports((NEW, OLD), prod_broker_0=(NEW,), prod_broker_1=(OLD,)), None)
    status = RocketClusterStatus(features=found.status())
    data = json.loads(json.dumps(status.model_dump(mode="json", by_alias=True, exclude_none=True)))
    assert data["features"]["groups"][0] == {"name": G0, "features": sorted(SUPPORTED)}
    assert persisted(data) == found
    assert persisted({}) is None and persisted(None) is None


# -- a topic's trace ------------------------------------------------------------------


def test_trace_is_withheld_until_every_controller_and_broker_reads_it() -> None:
    traced = canonical_spec(TopicSpec(name="audited", queues=2, trace=TraceMode.ALL))
    plain = canonical_spec(TopicSpec(name="plain", queues=2))
    closed = gate(_reports((NEW, NEW, NEW), prod_broker_0=(OLD, NEW)), None)
    assert withheld(traced, closed) and understood(traced, closed) == {**plain, "name": "audited"}
    assert not withheld(plain, closed) and understood(plain, closed) is plain
    opened = gate(_reports((NEW, NEW, NEW), prod_broker_0=(NEW, NEW)), closed)
    assert not withheld(traced, opened) and understood(traced, opened)["trace"] == "all"


# -- what a group's render holds ------------------------------------------------------


def _cluster(fronts: int | str = 2, trace: str | None = None) -> RocketCluster:
    data = load_manifest(REPO / "examples" / "cluster.yaml").model_dump(mode="json", by_alias=True)
    data["spec"]["brokers"]["frontProcesses"] = fronts
    if trace is not None:
        data["spec"]["topics"][0]["trace"] = trace
    return RocketCluster.model_validate(data)


def _group_objects(
    objects: list[dict[str, Any]], group: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    sts = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == group)
    cm = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == kube.broker_config_name(group)
    )
    return sts, cm


def _configs(cm: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(text) for text in cm["data"].values()]


def _hash(sts: dict[str, Any]) -> str:
    return str(sts["spec"]["template"]["metadata"]["annotations"][kube.ANNOTATION_POD_HASH])


def test_without_features_the_render_is_the_spec_s_and_an_open_gate_changes_nothing() -> None:
    cluster = _cluster(2, trace="all")
    today = render_cluster(cluster)
    assert render_cluster(cluster, RenderContext()) == today
    assert render_cluster(cluster, RenderContext(features=Gate())) == today


def test_a_number_of_front_processes_waits_for_every_broker_of_its_group() -> None:
    cluster = _cluster(2)
    one_old = gate(
        _reports((NEW, NEW, NEW), prod_broker_0=(NEW, OLD, NEW), prod_broker_1=(NEW, NEW, NEW)),
        None,
    )
    objects = render_cluster(cluster, RenderContext(features=one_old))
    today = render_cluster(cluster)
    held_sts, held_cm = _group_objects(objects, G0)
    assert all("frontProcesses" not in c for c in _configs(held_cm))  # auto: left out
    # the group's pods keep the template an old broker reads; the other group's as today
    assert _hash(held_sts) == _hash(_group_objects(render_cluster(_cluster("auto")), G0)[0])
    assert _group_objects(objects, G1) == _group_objects(today, G1)
    assert all(c["frontProcesses"] == 2 for c in _configs(_group_objects(today, G0)[1]))
    # once every broker reports it (after the roll), the number: one more roll
    opened = gate(
        _reports((NEW, NEW, NEW), prod_broker_0=(NEW, NEW, NEW), prod_broker_1=(NEW, NEW, NEW)),
        one_old,
    )
    assert render_cluster(cluster, RenderContext(features=opened)) == today


def test_delete_oldest_waits_for_every_broker_of_its_group() -> None:
    data = _cluster("auto").model_dump(mode="json", by_alias=True)
    data["spec"]["brokers"]["diskFull"] = "deleteOldest"
    cluster = RocketCluster.model_validate(data)
    one_old = gate(_reports((NEW, NEW, NEW), prod_broker_0=(NEW, OLD, NEW)), None)
    held_sts, held_cm = _group_objects(render_cluster(cluster, RenderContext(one_old)), G0)
    # Left out, as for a cluster that never asked: what the previous release reads.
    assert all("diskFull" not in c for c in _configs(held_cm))
    plain_sts, _ = _group_objects(render_cluster(_cluster("auto")), G0)
    assert _hash(held_sts) == _hash(plain_sts)
    _, today_cm = _group_objects(render_cluster(cluster), G0)
    assert all(c["diskFull"] == "deleteOldest" for c in _configs(today_cm))
    # The other group, all on this release, has it at once.
    _, other_cm = _group_objects(render_cluster(cluster, RenderContext(one_old)), G1)
    assert all(c["diskFull"] == "deleteOldest" for c in _configs(other_cm))


def test_trace_in_a_group_s_bootstrap_config_waits_and_changes_no_pod_hash() -> None:
    cluster = _cluster("auto", trace="all")
    old_group = gate(_reports((NEW, NEW, NEW), prod_broker_0=(OLD, OLD, OLD)), None)
    held_sts, held_cm = _group_objects(render_cluster(cluster, RenderContext(old_group)), G0)
    today_sts, today_cm = _group_objects(render_cluster(cluster), G0)
    assert all("trace" not in t for c in _configs(held_cm) for t in c["topics"])
    assert any(t.get("trace") == "all" for c in _configs(today_cm) for t in c["topics"])
    assert _hash(held_sts) == _hash(today_sts)  # topics are a hot setting: no roll
