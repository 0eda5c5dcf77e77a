"""`rocketctl bench console` end to end on a small cluster: every page is timed and
the figures are sane (the real run is `make bench`: 200 topics, 100 groups)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.ctl.bench.console_bench import run_console_bench

pytestmark = pytest.mark.timeout(600)


def test_console_bench_times_every_page(tmp_path: Path) -> None:
    said: list[str] = []
    result = run_console_bench(
        tmp_path / "work",
        topics=4,
        groups=3,
        broker_groups=1,
        replicas=1,
        rounds=3,
        # One cold load a page: each waits out the stats cache (2.7 s), 9 pages; three
        # (the bench's) only make the median steadier, which the test does not read.
        cold_loads=1,
        say=said.append,
    )
    pages = result["pages"]
    assert set(pages) == {
        "overview",
        "topics",
        "topic",
        "browse (queue)",
        "browse (key)",
        "message + trace",
        "groups",
        "group",
        "reports",
    }
    for name, row in pages.items():
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"], (name, row)
        assert row["cold_ms"] > 0, (name, row)
        assert row["bytes"] > 1000, name
    assert any(line.startswith("timing 9 pages") for line in said)
