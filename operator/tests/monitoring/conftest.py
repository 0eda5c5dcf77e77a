"""The real promtool (Debian package ``prometheus``; ``make debs`` installs it), as a
fixture: test modules here import nothing from each other (several ``tests`` packages
share one pytest session)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Promtool = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def promtool() -> Promtool:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: install the Debian package prometheus (make debs)")

    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [found, *args], check=False, capture_output=True, text=True, timeout=120, cwd=cwd
        )

    return run
