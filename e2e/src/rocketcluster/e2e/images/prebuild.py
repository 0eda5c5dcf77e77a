"""A pytest plugin: the container images a test session needs, built in the background
from the moment collection ends (``addopts = -p rocketcluster.e2e.images.prebuild``).

Why: after any commit the images rebuild (the workspace's wheels and the revision
label change), which took minutes of ``make test`` in the image tests' fixtures —
mostly waiting on buildah and the disk, not computing — while those tests run last
(e2e/tests, e2e/k8s). A test marked ``@pytest.mark.images("broker", ...)`` says which
images it runs; the session starts ``python -m rocketcluster.e2e.images build --only
<their union>`` once, at the lowest CPU and I/O priority, so the build takes only what
the tests before leave idle and is done when the image tests come.

Nothing is proven differently: the tests' fixtures still call ``build_images``
themselves. The image cache's lock makes such a call wait for a background build
still under way, then find every image cached (keyed by all its inputs: a change
made since rebuilds it); a background build that failed leaves the fixture to build
again and fail with its own message. The build's output is in ``prebuild.log`` in
the image cache; the terminal summary says how it ended.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketcluster.e2e.images import cache
from rocketcluster.e2e.images.catalogue import IMAGES

MARK = "images"
STOP_WAIT_S = 60.0  # a session ending early stops the build; buildah cleans up meanwhile


@dataclass
class Prebuild:
    """The background build: ``python -m rocketcluster.e2e.images build`` in a process
    group of its own, its output in ``log``."""

    names: tuple[str, ...]
    process: subprocess.Popen[bytes]
    log: Path
    started: float

    @classmethod
    def start(cls, names: tuple[str, ...], log: Path, cwd: Path) -> Prebuild:
        argv = [sys.executable, "-m", "rocketcluster.e2e.images", "build", "--only"]
        argv.append(",".join(names))
        ionice = shutil.which("ionice")
        if ionice:  # the idle I/O class: the tests' commit logs go first
            argv = [ionice, "-c", "3", *argv]
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["nice", "-n", "19", *argv],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(names, process, log, time.monotonic())

    def stop(self) -> None:
        """Interrupt a build the session no longer waits for (the session ended
        before the image tests, or was interrupted): its whole process group."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def outcome(self) -> str:
        """One line: how the build ended (its last line of output), or that it was
        still running."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        last = lines[-1] if lines else "no output"
        code = self.process.poll()
        if code is None:
            state = "still running"
        elif code < 0:
            state = f"stopped by {signal.Signals(-code).name}"
        else:
            state = f"exit {code}"
        return f"images {', '.join(self.names)} built in the background ({state}): {last}"


def wanted(items: Iterable[pytest.Item]) -> tuple[str, ...]:
    """The images the selected tests are marked with, in the catalogue's order."""
    names: set[str] = set()
    for item in items:
        for mark in item.iter_markers(MARK):
            names.update(str(a) for a in mark.args)
    known = {spec.name for spec in IMAGES}
    unknown = sorted(names - known)
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.{MARK} names unknown images {unknown}; the catalogue has {sorted(known)}"
        )
    return tuple(spec.name for spec in IMAGES if spec.name in names)


PREBUILD = pytest.StashKey[Prebuild]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(*names): the test runs these container images; a session that selects "
        "it builds them in the background from its start (rocketcluster.e2e.images.prebuild)",
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or PREBUILD in config.stash:
        return
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker not in (None, "gw0"):
        return  # pytest-xdist: every worker collects, the first one builds
    names = wanted(session.items)
    if names:
        log = cache.cache_root() / "prebuild.log"
        config.stash[PREBUILD] = Prebuild.start(names, log, Path(str(config.rootpath)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    prebuild = session.config.stash.get(PREBUILD, None)
    if prebuild is not None:
        prebuild.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    prebuild = terminalreporter.config.stash.get(PREBUILD, None)
    if prebuild is not None:
        terminalreporter.write_line(prebuild.outcome())
