"""The security benchmark, tiny: every case (plain, TLS, auth, TLS+auth) comes up, every
shape sends through each without an error — signed and over TLS where the case asks —
the broker's CPU is read, and the table and summary come out. Behaviour, not speed."""

from __future__ import annotations

from pathlib import Path

from rocketcluster.ctl.bench import security_bench
from rocketcluster.ctl.bench.results import format_table


def test_every_security_case_runs_and_sends(tmp_path: Path) -> None:
    result = security_bench.run_security_bench(tmp_path, 0.5, reps=1, check_rounds=1000)

    assert list(result["cases"]) == list(security_bench.SHAPES)
    for shape, cases in result["cases"].items():
        assert list(cases) == ["plain", "tls", "auth", "tls+auth"], shape
        for case, row in cases.items():
            assert row["messages"] > 0 and row["errors"] == 0, (shape, case)
            assert row["broker_cpu_us_per_msg"] > 0, (shape, case)
            assert row["ratio_to_plain"] > 0
        assert cases["plain"]["ratio_to_plain"] == 1.0
    assert result["check"]["cached_us"] > 0 and result["check"]["uncached_us"] > 0

    table = format_table(security_bench.rows(result), security_bench.COLUMNS)
    assert "broker_cpu_us_per_msg" in table and "tls+auth" in table
    lines = security_bench.summary_lines(result)
    assert lines[0].startswith("single_64: TLS costs ")
    assert lines[-1].startswith("the check alone: ")
    for runtime_dir in tmp_path.iterdir():  # every broker it started is stopped
        assert not any(p.name.endswith(".pid") for p in runtime_dir.rglob("*.pid")), runtime_dir
