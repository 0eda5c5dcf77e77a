"""The README's soak recovery table is the committed reports' figures
(rocketcluster.ctl.chaos.record): a report added or changed without the table, or a
figure edited by hand, fails here with the table to paste."""

from __future__ import annotations

from pathlib import Path

from rocketcluster.ctl.chaos.record import local_runs, record_table, table

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "e2e" / "chaos" / "results"


def test_the_readme_recovery_table_is_the_reports() -> None:
    assert local_runs(RESULTS), "no soak report of record under e2e/chaos/results"
    expected = record_table(RESULTS)
    readme = (REPO / "README.md").read_text()
    assert expected in readme, (
        "README.md's recovery table differs from the soak reports; the table is:\n"
        f"{expected}\n(python -m rocketcluster.ctl.chaos.record)"
    )


def test_the_table_sets_the_runs_side_by_side_most_faults_first() -> None:
    runs = [
        {
            "recovery_by_kind": {
                "kill": {"count": 3, "recovery_p99_s": 1.234, "after_heal_p99_s": 0.5},
                "pause": {"count": 5, "recovery_p99_s": 2.0, "whole_p99_s": 4.0},
            }
        },
        {"recovery_by_kind": {"kill": {"count": 4, "recovery_p99_s": 0.0, "whole_p99_s": 1.0}}},
    ]
    lines = table(runs).splitlines()
    assert lines[2] == "| kill | 3 + 4 | 1.23 / 0.00 s | 0.50 / — s | — / — s | — / 1.00 s |"
    assert lines[3] == "| pause | 5 + 0 | 2.00 / — s | — / — s | — / — s | 4.00 / — s |"
