"""rocketctl's store verbs, run for real (short)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rocketcluster.ctl.cli import main


def test_demo_store_loses_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "store", "--dir", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["lost"] == 0
    assert report["acknowledged"] >= 3000
    assert report["stored"] >= report["acknowledged"]
    assert report["consumed_through_queues"] == report["stored"]


def test_bench_store_writes_json_with_ratios(tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(
        main, ["bench", "store", "--seconds", "0.2", "--out", str(out), "--work-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    [path] = list(out.glob("store-*.json"))
    data = json.loads(path.read_text())
    assert {
        (r["flush"], r["writers"], r["batch"]) for r in data["append"] if r["path"] == "store-put"
    } == {(f, w, b) for f in ("async", "sync") for w in (1, 8, 64) for b in (1, 32)}
    assert [r["path"] for r in data["append"]].count("commitlog-append") == 1
    for row in data["append"]:
        assert row["records"] > 0 and row["raw_mb_per_s"] > 0 and row["ratio_to_raw"] > 0
    assert data["read"]["records"] > 0
    assert "ratio_to_raw" in result.output
