"""The background image build (rocketcluster.e2e.images.prebuild), in a pytest session
of its own run as a subprocess: a session selecting a test marked ``images(...)``
starts ``python -m rocketcluster.e2e.images build --only <those>`` at the lowest CPU
priority, stops it when the session ends first and says so; an unknown image name is
a usage error; a session that only collects builds nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import inner_session

PLUGIN = "rocketcluster.e2e.images.prebuild"

INNER = """
import os, time

from rocketcluster.e2e.images.prebuild import PREBUILD


@pytest.mark.images("controller", "broker")
def test_marked(request):
    prebuild = request.config.stash[PREBUILD]
    assert prebuild.names == ("broker", "controller")  # the catalogue's order
    assert prebuild.process.poll() is None
    deadline = time.monotonic() + 30  # `nice` has set it once it runs python
    while os.getpriority(os.PRIO_PROCESS, prebuild.process.pid) != 19:
        assert time.monotonic() < deadline, "the build never ran at niceness 19"
        time.sleep(0.05)
    print(f"PREBUILD PID {prebuild.process.pid}")


def test_unmarked():
    pass
"""


def _session(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text("import pytest\n" + body)
    env = {**os.environ, "ROCKETCLUSTER_IMAGE_CACHE": str(tmp_path / "cache")}
    return inner_session(tmp_path, "-p", PLUGIN, *args, env=env)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    return _session(tmp_path_factory.mktemp("prebuild"), INNER)


def test_a_marked_test_starts_the_build_at_the_lowest_priority(
    session: subprocess.CompletedProcess[str],
) -> None:
    assert session.returncode == 0, session.stdout + session.stderr
    assert "2 passed" in session.stdout, session.stdout


def test_the_session_stops_the_build_it_started_and_says_how_it_ended(
    session: subprocess.CompletedProcess[str],
) -> None:
    lines = session.stdout.splitlines()
    (pid,) = [int(line.split()[-1]) for line in lines if "PREBUILD PID" in line]
    assert not _alive(pid), f"the background build {pid} outlived its session"
    summary = [line for line in lines if "built in the background" in line]
    assert summary and summary[0].startswith("images broker, controller"), session.stdout


def test_an_unknown_image_is_a_usage_error(tmp_path: Path) -> None:
    done = _session(tmp_path, '@pytest.mark.images("nope")\ndef test_x():\n    pass\n')
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "unknown images ['nope']" in done.stderr, done.stderr


def test_collecting_only_builds_nothing(tmp_path: Path) -> None:
    done = _session(tmp_path, INNER, "--collect-only")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "built in the background" not in done.stdout
    assert not (tmp_path / "cache" / "prebuild.log").exists()
