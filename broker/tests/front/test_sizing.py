"""How many fronts ``auto`` means, from the container's CPU, and each front's share
of the client limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.api.limits import ClientLimits
from rocketcluster.broker.front import sizing


def test_auto_pays_only_from_three_cores_and_is_bounded() -> None:
    assert sizing.fronts_for(None) == 0
    assert sizing.fronts_for(2.0) == 0
    assert sizing.fronts_for(3.0) == 2
    assert sizing.fronts_for(4.0) == 3
    assert sizing.fronts_for(8.0) == 7
    assert sizing.fronts_for(200.0) == sizing.MAX_FRONTS


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert sizing.container_cores(tmp_path, {}) == 4.0
    (tmp_path / "cpu.max").write_text("max 100000\n")
    # No quota: a 64-core node must not mean 63 fronts; the request decides, or nothing.
    assert sizing.container_cores(tmp_path, {}) is None
    assert sizing.container_cores(tmp_path, {sizing.CPU_REQUEST_ENV: "3500"}) == 3.5


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    v1 = tmp_path / "cpu"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("250000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert sizing.container_cores(tmp_path, {}) == 2.5
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert sizing.container_cores(tmp_path, {}) is None


def test_resolve_takes_numbers_and_auto() -> None:
    assert sizing.resolve(0) == 0
    assert sizing.resolve(3) == 3
    assert sizing.resolve("auto") >= 0
    with pytest.raises(ValueError, match="frontProcesses"):
        sizing.resolve("many")


def test_broker_wide_limits_are_split_per_client_limits_stay_whole() -> None:
    limits = ClientLimits(
        max_concurrent_rpcs=1000, max_connections=10, max_connections_per_address=3
    )
    share = sizing.front_share(limits, 4)
    assert share.max_concurrent_rpcs == 250
    assert share.max_connections == 3  # rounded up: never below what was asked in all
    assert share.max_connections_per_address == 1
    assert share.max_inflight_requests_per_client == limits.max_inflight_requests_per_client
    assert share.max_concurrent_streams == limits.max_concurrent_streams
    assert sizing.front_share(limits, 1) == limits
