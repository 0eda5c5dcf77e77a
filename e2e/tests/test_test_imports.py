"""No test module imports relatively through the ``tests`` name every workspace
member shares (rocketcluster.e2e.test_imports): such an import works or fails by
the order pytest collects in."""

from __future__ import annotations

import tomllib
from pathlib import Path

from rocketcluster.e2e.test_imports import fragile_relative_imports

ROOT = Path(__file__).resolve().parents[2]


def _problems(relative: str, source: str) -> list[str]:
    return fragile_relative_imports(Path(relative), source)


def test_a_sibling_import_at_the_top_of_a_tests_package_is_fragile() -> None:
    # The import CI failed on: controller/tests was not the first ``tests`` collected.
    [problem] = _problems("controller/tests/test_admin_api.py", "from .members import x\n")
    assert problem.startswith("controller/tests/test_admin_api.py:1: `from .members import")
    assert "conftest.py" in problem


def test_reaching_into_or_above_another_package_is_fragile() -> None:
    source = "import os\n\nfrom .store.test_page_cache import evict\nfrom ..raft import y\n"
    lines = [p.split(": ", 1)[0] for p in _problems("broker/tests/store/test_x.py", source)]
    assert lines == ["broker/tests/store/test_x.py:3", "broker/tests/store/test_x.py:4"]


def test_conftest_and_a_subpackage_sibling_are_safe() -> None:
    source = "from .conftest import a\nfrom .harness import b\nfrom . import child\n"
    assert _problems("controller/tests/raft/test_core.py", source) == []
    assert _problems("broker/tests/messaging/test_x.py", "from .conftest import a\n") == []
    assert _problems("ctl/tests/test_x.py", "from .conftest import a\n") == []


def test_no_test_module_in_the_suite_imports_through_the_shared_name() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    testpaths = config["tool"]["pytest"]["ini_options"]["testpaths"]
    modules = [m for tree in testpaths for m in sorted((ROOT / tree).rglob("*.py"))]
    assert len(modules) > 200, "the test trees were not found"
    problems = [
        problem
        for module in modules
        for problem in fragile_relative_imports(module.relative_to(ROOT), module.read_text())
    ]
    assert problems == [], "\n".join(problems)
