"""rocketctl's store verbs, run for real (short)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rocketcluster.ctl.cli import main


def test_demo_store_loses_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "store", "--dir", str(tmp_path / "demo"), "--json"])
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


def test_demo_standalone_with_the_official_client(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "standalone.yaml"
    result = CliRunner().invoke(
        main,
        ["demo", "standalone", "-f", str(example), "--dir", str(tmp_path / "d"), "--count", "40"],
    )
    assert result.exit_code == 0, result.output
    # people read a few lines; the same report is JSON behind --json
    lines = result.output.splitlines()
    assert len(lines) < 15 and lines[-1].startswith("verdict:"), result.output
    assert any("consumed and acknowledged 40" in line for line in lines)
    result = CliRunner().invoke(
        main,
        [
            "demo",
            "standalone",
            "-f",
            str(example),
            "--dir",
            str(tmp_path / "d"),
            "--count",
            "40",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["produced"] == 40 and report["consumedAndAcked"] == 40 and report["missing"] == 0
    assert report["lookupById"]["body"].startswith("order #0")
    assert any(line.startswith("rocketmq_messages_in_total") for line in report["metrics"])
    assert not (tmp_path / "d" / "cluster.json").exists()  # stopped again


def test_bench_produce_writes_ratios(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "produce",
            "--seconds",
            "0.5",
            "--flush",
            "async",
            "--out",
            str(tmp_path / "out"),
            "--work-dir",
            str(tmp_path / "w"),
        ],
    )
    assert result.exit_code == 0, result.output
    [path] = list((tmp_path / "out").glob("produce-*.json"))
    data = json.loads(path.read_text())
    assert set(data["ratios"]["async"]) == {"lean_produce", "official_produce"}
    assert data["broker"]["async"]["lean_produce"]["messages"] > 0
    assert data["ceiling"]["official_produce"]["messages"] > 0
