"""The skip guard (rocketcluster.e2e.skip_guard): an unexpected skip fails a pytest
session, an allowed one does not, and an allowed entry whose tests ran is stale —
each in a real inner pytest session, with and without xdist workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.e2e.skip_guard import (
    ALLOWED_FILE,
    Allowed,
    AllowListError,
    judge,
    load_allowed,
)

from .conftest import inner_session

PLUGIN = "rocketcluster.e2e.skip_guard"
TESTS = """
import pytest

def test_runs():
    pass

def test_no_tool():
    pytest.skip("the tool is not installed")

@pytest.mark.parametrize("backend", ["emulated", "real"])
def test_journey(backend):
    if backend == "real":
        pytest.skip("no real cluster here")
"""


def _project(tmp_path: Path, allowed: str) -> Path:
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / ALLOWED_FILE).write_text(allowed)
    return tmp_path


REAL_ONLY = '[[skip]]\ntests = "*[[]real]"\nreason = "no cluster"\n'
BOTH = REAL_ONLY + '[[skip]]\ntests = "*::test_no_tool"\nreason = "the tool"\n'


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_an_unexpected_skip_fails_the_session(tmp_path: Path, workers: list[str]) -> None:
    done = inner_session(_project(tmp_path, REAL_ONLY), "-p", PLUGIN, *workers)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "NOT ALLOWED TO SKIP test_sample.py::test_no_tool: the tool is not installed" in (
        done.stdout
    )
    assert "2 passed, 2 skipped" in done.stdout  # every test itself passed or skipped


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_allowed_skips_pass(tmp_path: Path, workers: list[str]) -> None:
    done = inner_session(_project(tmp_path, BOTH), "-p", PLUGIN, *workers)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"skip guard: 2 skipped, each allowed by {ALLOWED_FILE}" in done.stdout


def test_an_allowed_entry_whose_tests_ran_is_stale(tmp_path: Path) -> None:
    stale = BOTH + '[[skip]]\ntests = "*::test_runs"\nreason = "it used to skip"\n'
    done = inner_session(_project(tmp_path, stale), "-p", PLUGIN)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "ALLOWED TO SKIP BUT RAN *::test_runs" in done.stdout


def test_a_session_that_fails_anyway_keeps_its_status(tmp_path: Path) -> None:
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    done = inner_session(_project(tmp_path, REAL_ONLY), "-p", PLUGIN)
    assert done.returncode == 1
    assert "1 failed" in done.stdout


def test_the_rule_on_its_own() -> None:
    allowed = [Allowed("e2e/k8s/*[[]real]", "no cluster")]
    reported = {"e2e/k8s/test_a.py::test_x[real]", "e2e/k8s/test_a.py::test_x[emulated]", "t::u"}
    ok = judge(allowed, reported, {"e2e/k8s/test_a.py::test_x[real]": "none"})
    assert ok.ok
    bad = judge(allowed, reported, {"t::u": "no prometheus"})
    assert bad.unexpected == [("t::u", "no prometheus")]
    assert bad.stale == allowed  # its tests were reported and none of them skipped
    assert judge(allowed, {"t::u"}, {}).ok  # its tests were not in this session


def test_a_malformed_allow_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ALLOWED_FILE
    path.write_text('[[skip]]\ntests = "x"\n')
    with pytest.raises(AllowListError, match="needs `tests` and `reason`"):
        load_allowed(path)
    path.write_text('[[skip]]\ntests = "x"\nreason = "  "\n')
    with pytest.raises(AllowListError, match="gives no reason"):
        load_allowed(path)
    path.write_text("[[skip]\n")
    with pytest.raises(AllowListError):
        load_allowed(path)
    assert load_allowed(tmp_path / "absent.toml") == []


def test_the_repositorys_list_names_only_the_real_cluster() -> None:
    root = Path(__file__).resolve().parents[2]
    allowed = load_allowed(root / ALLOWED_FILE)
    assert [a.pattern for a in allowed] == ["e2e/k8s/*[[]real]"]
