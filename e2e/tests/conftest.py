"""Shared fixtures of the e2e member's own tests: the kube harness binaries, and an
inner pytest session for the plugins' tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocketcluster.e2e.kube.binaries import Binaries, BinariesUnavailable, ensure_binaries


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """kubectl and helm, unpacked once; a test that needs them fails loudly when
    they cannot be had (the error says what to do)."""
    try:
        return ensure_binaries()
    except BinariesUnavailable as exc:
        pytest.fail(str(exc))


def inner_session(
    directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``pytest`` on the test files in ``directory``, in a process of its own and with
    none of the repository's settings: a plugin's test sees only the plugins it names
    in ``args`` (``-p <module>``), and xdist's when ``args`` ask for workers. Installed
    plugins are not auto-loaded: they cost ~4 s of start-up in every process (each
    xdist worker too) and none of them is what such a test is about."""
    workers = ["-p", "xdist.plugin"] if "-n" in args else []
    argv = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", *workers, *args]
    environment = {**(os.environ if env is None else env), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [*argv, "--rootdir", str(directory), "-c", os.devnull, str(directory)],
        check=False,
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
