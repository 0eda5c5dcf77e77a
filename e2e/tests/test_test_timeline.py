"""The test timeline's summary: each worker's span and the longest units."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.e2e.test_timeline import last_suite, main, parse, summary

TIMELINE = """\
gw0 100.0 160.0 spark-jobs/tests/test_run.py::test_a
gw0 160.0 400.0 spark-jobs/tests/test_lag.py::test_b
gw1 100.5 130.0 e2e/local/test_failover.py::test_c
gw1 130.0 131.0 e2e/local/test_failover.py::test_d
"""


def test_the_summary_names_each_worker_and_the_longest_unit_first() -> None:
    lines = summary(parse(TIMELINE), top=5)
    assert lines[0] == "gw0: 2 tests, 0s -> 300s, busy 300s"
    assert lines[1] == "gw1: 2 tests, 0s -> 31s, busy 30s"
    assert lines[2] == "longest 2 of 2 units (span, worker, from):"
    # The Spark tests are one unit (one shared session), the failover file another.
    assert lines[3].split() == ["300s", "gw0", "@0s", "spark-jobs/tests/"]
    assert lines[4].split() == ["30s", "gw1", "@0s", "e2e/local/test_failover.py"]


def test_a_torn_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse("gw0 1 2 a::b\ngw0 1\n")


def test_a_missing_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "none.txt")]) == 2
    assert "cannot read the timeline" in capsys.readouterr().err


def test_only_the_last_suite_run_of_a_kept_file_is_summed_up() -> None:
    """The hook appends: a file kept between two ``make test`` runs holds both, and
    their spans added up meant nothing (a fresh run read as 7,900 s)."""
    runs = parse(
        "gw0 1000.0 1100.0 a/test_old.py::t\n"
        "gw0 5000.0 5010.0 a/test_new.py::t\n"
        "main 5300.0 5320.0 a/test_alone.py::t\n"  # the alone step, right after
    )
    last, earlier = last_suite(runs)
    assert earlier == 1
    assert [r.nodeid for r in last] == ["a/test_new.py::t", "a/test_alone.py::t"]
    assert last_suite(last) == (last, 0)


def test_cpu_per_worker_and_the_units_that_used_most() -> None:
    """The parallel step is CPU-bound: what to cut is CPU, and the summary says
    where it went (lines without it, from older files, still parse)."""
    runs = parse(
        "gw0 100.0 160.0 cpu=50.5 spark-jobs/tests/test_run.py::test_a\n"
        "gw0 160.0 400.0 cpu=20.0 e2e/monitoring/test_live.py::test_b[x y]\n"
        "gw1 100.0 130.0 cpu=70.0 e2e/local/test_failover.py::test_c\n"
        "gw1 130.0 131.0 e2e/local/test_old.py::test_d\n"
    )
    assert runs[1].nodeid == "e2e/monitoring/test_live.py::test_b[x y]"
    assert runs[3].cpu is None
    lines = summary(runs, top=2)
    assert lines[0].endswith("busy 300s, cpu 70s")
    assert lines[1].endswith("busy 31s, cpu 70s")
    at = lines.index("most CPU, 2 of 3 units (seconds):")
    assert [line.split() for line in lines[at + 1 :]] == [
        ["70s", "e2e/local/test_failover.py"],
        ["50s", "spark-jobs/tests/"],
    ]
