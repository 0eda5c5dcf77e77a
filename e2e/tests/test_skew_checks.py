"""The version-skew checks of the upgrade roll (rocketcluster.e2e.k8s.skew), pure: two
answers at one Raft index must be one catalogue; a member of the previous release ran
until its last answer or its pod's deletion, whichever is later; a batch command
before that is reported, one after it is not."""

from __future__ import annotations

from rocketcluster.api.features import SUPPORTED
from rocketcluster.e2e.k8s.rollcheck import PodEvent
from rocketcluster.e2e.k8s.skew import (
    MemberSample,
    disagreements,
    early_batches,
    previous_release_ran_until,
)

OLD: frozenset[str] = frozenset()


def _sample(
    at: float,
    member: str,
    applied: int | None,
    catalogue: str,
    features: frozenset[str] = SUPPORTED,
) -> MemberSample:
    return MemberSample(
        at=at,
        member=member,
        pod=f"{member}-{'new' if features else 'old'}",
        features=features,
        leads=False,
        applied=applied,
        catalogue=catalogue if applied is not None else None,
    )


def test_answers_at_one_index_must_be_one_catalogue() -> None:
    agreeing = [
        _sample(1.0, "c-0", 10, '{"version":3}', OLD),
        _sample(1.2, "c-1", 10, '{"version":3}'),
        _sample(2.0, "c-1", 11, '{"version":4}'),
        _sample(2.1, "c-0", None, "ignored", OLD),  # its index moved while it was read
    ]
    assert disagreements(agreeing) == []
    # a member of the previous release failed the batch at index 11: still version 3
    diverged = [*agreeing, _sample(3.0, "c-0", 11, '{"version":3}', OLD)]
    (problem,) = disagreements(diverged)
    assert problem.startswith("applied index 11:") and "c-0 (c-0-old)" in problem


def test_a_member_of_the_previous_release_runs_until_its_pod_goes() -> None:
    samples = [
        _sample(5.0, "c-2", 20, "x", OLD),
        _sample(6.0, "c-0", 21, "y"),
    ]
    events = [
        PodEvent(4.0, "deleting", "c-1-old"),  # never answered here: not counted
        PodEvent(7.5, "deleting", "c-2-old"),
        PodEvent(9.0, "deleting", "c-0-new"),
    ]
    assert previous_release_ran_until(samples, events, "catalogue-batch") == 7.5
    assert previous_release_ran_until(samples, [], "catalogue-batch") == 5.0
    assert previous_release_ran_until(samples[1:], events, "catalogue-batch") is None


def test_a_batch_before_the_previous_release_stopped_is_reported() -> None:
    events = [
        {"index": 40, "time": 7_000, "command": "PutCatalogueEntries", "detail": {"topics": 2}},
        {"index": 41, "time": 7_200, "command": "PutTopic", "detail": {}},
        {"index": 42, "time": 8_000, "command": "PutCatalogueEntries", "detail": {"topics": 1}},
    ]
    (early,) = early_batches(events, 7.5)
    assert early.startswith("index 40 at 7.0")
    assert early_batches(events, 6.0) == [] and early_batches(events, None) == []
