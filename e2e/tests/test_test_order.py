"""The suite's order: files with a slow test first, a file's tests together, and the
Spark tests one work unit (rocketcluster.e2e.test_order)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketcluster.e2e.test_order import slow_files_first, unit_of


@dataclass
class FakeTest:
    nodeid: str
    slow: bool = False


def _ordered(items: list[FakeTest]) -> list[str]:
    return [t.nodeid for t in slow_files_first(items, lambda t: t.nodeid, lambda t: t.slow)]


def test_files_holding_a_slow_test_go_first_and_keep_their_tests_together() -> None:
    items = [
        FakeTest("a/test_one.py::x"),
        FakeTest("a/test_two.py::x"),
        FakeTest("a/test_two.py::y", slow=True),
        FakeTest("a/test_one.py::y"),
        FakeTest("b/test_three.py::x", slow=True),
    ]
    assert _ordered(items) == [
        "a/test_two.py::x",
        "a/test_two.py::y",
        "b/test_three.py::x",
        "a/test_one.py::x",
        "a/test_one.py::y",
    ]


def test_the_spark_tests_are_one_unit_and_other_files_their_own() -> None:
    assert unit_of("spark-jobs/tests/test_lag.py::test_a") == "spark-jobs/tests/"
    assert unit_of("spark-jobs/tests/test_run.py::test_b[x]") == "spark-jobs/tests/"
    assert unit_of("broker/tests/test_x.py::TestY::test_z") == "broker/tests/test_x.py"


def test_a_spark_file_with_a_slow_test_takes_every_spark_test_ahead() -> None:
    items = [
        FakeTest("broker/tests/test_x.py::a"),
        FakeTest("spark-jobs/tests/test_lag.py::a"),
        FakeTest("spark-jobs/tests/test_live.py::a", slow=True),
    ]
    assert _ordered(items) == [
        "spark-jobs/tests/test_lag.py::a",
        "spark-jobs/tests/test_live.py::a",
        "broker/tests/test_x.py::a",
    ]


def test_the_spark_unit_goes_first_even_behind_slow_files_collected_before_it() -> None:
    """The longest unit must not start last: it was the parallel step's tail."""
    items = [
        FakeTest("broker/tests/test_slow.py::a", slow=True),
        FakeTest("broker/tests/test_fast.py::a"),
        FakeTest("spark-jobs/tests/test_lag.py::a"),
    ]
    assert _ordered(items) == [
        "spark-jobs/tests/test_lag.py::a",
        "broker/tests/test_slow.py::a",
        "broker/tests/test_fast.py::a",
    ]
