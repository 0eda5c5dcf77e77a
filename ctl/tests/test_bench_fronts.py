"""The front-process cases of ``bench cpu``: the projection's arithmetic, several
clients' results as one, and the store feeder against a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.ctl.bench.cpu.fronts import projected_rate, projection, run_fed
from rocketcluster.ctl.bench.cpu.measure import combined


def test_the_store_process_bounds_a_pod_once_the_fronts_have_cores() -> None:
    assert projected_rate(100.0, 0.0, 8) == pytest.approx(10_000)  # one process
    assert projected_rate(100.0, 400.0, 2) == pytest.approx(2_500)  # one core of fronts
    assert projected_rate(100.0, 400.0, 4) == pytest.approx(7_500)
    assert projected_rate(100.0, 400.0, 8) == pytest.approx(10_000)  # the store's core
    assert projected_rate(0.0, 400.0, 8) == 0.0


def _case(store: float, fronts: list[float]) -> dict[str, object]:
    us = {"master": store, "client": 500.0}
    us |= {f"master-front-{n}": v for n, v in enumerate(fronts)}
    return {"official_produce": {"cpu_us_per_msg": us}}


def test_projection_takes_the_most_fronts_and_the_fed_store() -> None:
    cases = {
        "standalone_fronts0": _case(450.0, []),
        "standalone_fronts1": _case(180.0, [400.0]),
        "standalone_fronts2": _case(200.0, [150.0, 250.0]),
    }
    fed = {"standalone": {"store_us_per_msg": 50.0}}
    p = projection(cases, fed)["standalone_official_produce"]
    assert p["store_process_us_per_msg"] == 200.0 and p["fronts_us_per_msg"] == 400.0
    assert p["single_process_msgs_per_s"] == pytest.approx(1e6 / 450)
    assert p["msgs_per_s_by_cores"]["8"] == pytest.approx(5_000)
    assert p["msgs_per_s_by_cores_fed"]["8"] == pytest.approx(17_500)
    assert p["msgs_per_s_by_cores_fed"]["16"] == pytest.approx(20_000)


def test_several_clients_add_up_and_keep_the_worst_latency() -> None:
    one = {"messages": 100, "msgs_per_s": 50.0, "errors": 1, "p50_ms": 2.0, "p99_ms": 9.0}
    two = {"messages": 300, "msgs_per_s": 150.0, "errors": 0, "p50_ms": 3.0, "p99_ms": 7.0}
    both = combined([one, two])
    assert (both["messages"], both["msgs_per_s"], both["errors"]) == (400, 200.0, 1)
    assert (both["p50_ms"], both["p99_ms"], both["clients"]) == (3.0, 9.0, 2)


@pytest.mark.slow
def test_the_feeder_drives_a_real_store_process(tmp_path: Path) -> None:
    """A broker whose one front is the feeder: it answers every call, and the store
    process's CPU per message is measured over the window."""
    result = run_fed("standalone", tmp_path, seconds=2.0, warmup=0.5)
    assert result["messages"] > 100 and result["failed"] == 0
    assert 0 < result["store_us_per_msg"] < 100_000
    assert result["cpu_us_per_msg"]["master"] > 0
