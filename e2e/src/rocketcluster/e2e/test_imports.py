"""Which relative imports in the test trees depend on the order pytest collects in.

The suite runs with ``--import-mode=importlib``, and every workspace member's test
package is called ``tests``. A module is imported under its package name when it can
be, so ``tests`` in ``sys.modules`` is whichever member's ``tests`` pytest met first.
A relative import that goes through that name (a module directly in a ``tests``
package importing a sibling, or any module reaching into another package) finds the
wrong member's modules when another member is collected first: CI failed on
``from .members import ...`` in ``controller/tests`` once the broker's ``tests`` came
first. What stays safe: ``.conftest`` (pytest registers every conftest itself) and,
in a subpackage (``tests/raft``), a sibling module of the same directory."""

from __future__ import annotations

import ast
from pathlib import Path

SHARED_PACKAGE = "tests"


def fragile_relative_imports(path: Path, source: str) -> list[str]:
    """``path:line: reason`` for each relative import in ``source`` that resolves
    through the shared ``tests`` name. ``path`` is the module's file, whose parent
    directory is its package."""
    problems = []
    top_of_a_tests_package = path.parent.name == SHARED_PACKAGE
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        target = "." * node.level + (node.module or "")
        if node.module == "conftest" and node.level == 1:
            continue
        if node.level > 1:
            reason = "reaches above its own package"
        elif node.module is not None and "." in node.module:
            reason = "reaches into another package"
        elif top_of_a_tests_package:
            reason = f"imports a sibling of a package every member calls {SHARED_PACKAGE!r}"
        else:
            continue
        problems.append(
            f"{path}:{node.lineno}: `from {target} import ...` {reason}; "
            "share it through conftest.py or an installed module (rocketcluster.ctl.testing)"
        )
    return problems
