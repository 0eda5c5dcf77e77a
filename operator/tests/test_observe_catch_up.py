"""What the operator reads of a group's replication from its brokers' admin answers
(rocketcluster.operator.observe): the master's report of when each slave last caught
up, and a master of an earlier release that does not report it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rocketcluster.operator.observe import pod_state, slaves_caught_up


def _broker(
    role: str, broker_id: int, slaves: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "role": role,
        "replication": {"brokerId": broker_id, "role": role, "slaves": slaves or {}},
    }


def test_the_master_reports_when_each_slave_caught_up() -> None:
    master = _broker(
        "master",
        1,
        {
            "2": {"ackOffset": 10, "connected": True, "caughtUpAgoSeconds": 0.4},
            "3": {"ackOffset": 0, "connected": True, "caughtUpAgoSeconds": None},
        },
    )
    infos = [_broker("slave", 2), master, None, _broker("slave", 3)]
    assert slaves_caught_up(infos) == {2: 0.4, 3: None}


def test_a_master_of_an_earlier_release_reports_nothing() -> None:
    master = _broker("master", 1, {"2": {"ackOffset": 10, "connected": True}})
    assert slaves_caught_up([master, _broker("slave", 2)]) is None
    assert slaves_caught_up([_broker("slave", 2), None]) is None  # no master answered


def test_a_master_without_slaves_reports_that_none_caught_up() -> None:
    assert slaves_caught_up([_broker("master", 1)]) == {}


def test_the_pod_state_carries_it() -> None:
    pod = {
        "metadata": {"name": "g-1", "creationTimestamp": "2026-11-30T00:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.2"},
    }
    now = datetime(2026, 11, 30, 0, 0, 30, tzinfo=UTC)
    state = pod_state(pod, now, _broker("slave", 2), caught_up_ago_s=0.4)
    assert (state.broker_id, state.caught_up_ago_s, state.ready_for_s) == (2, 0.4, 30.0)
