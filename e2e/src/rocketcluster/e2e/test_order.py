"""A pytest plugin: the order tests run in, and how pytest-xdist shares them out
(``addopts = -p rocketcluster.e2e.test_order``; ``make test`` runs ``-n 3 --dist
loadfile``).

Why: most of the suite's wall time is a few files that start clusters, emulators,
Spark or Prometheus and then mostly wait (failovers, long polls, rolls), while the
rest is hundreds of short CPU-bound tests. Several workers overlap the waiting of one
with the work of the others, but only if the long files start first: a worker that
picks up a five-minute journey at the end leaves the others idle for five minutes.

- **Longest first.** The units of :data:`SHARED_SESSIONS` come first (each is many
  files in one worker: the Spark unit is the suite's longest, ~15 minutes under load,
  and started 392 s late behind the slow files collected before it, which made it the
  parallel step's tail); then files holding a test marked ``slow``; then the rest (both
  with and without xdist: the order inside each group is the collection order, and a
  file's tests stay together, so module fixtures are set up once).
- **Work units.** Under ``--dist loadfile`` a unit is a file, as xdist does, except
  where tests share a session fixture that is expensive to start: every test under a
  prefix of :data:`SHARED_SESSIONS` is one unit, so one worker starts it once.
- **Timeline.** With ``ROCKETCLUSTER_TEST_TIMELINE=<file>``, every test appends a line
  ``<worker> <start> <end> cpu=<seconds> <nodeid>`` (epoch seconds, setup to
  teardown; the CPU its worker and the processes it started and reaped used): which
  worker ran what when, and what the cores were busy with — the parallel step is
  CPU-bound, so what to cut is CPU, not waiting (``python -m
  rocketcluster.e2e.test_timeline <file>`` sums it up).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

# Tests under these prefixes share one costly session fixture (the value says which):
# one worker runs them all.
SHARED_SESSIONS = {
    "spark-jobs/tests/": "one Spark session (a JVM) per test session",
}


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its shared-session prefix, else its file."""
    for prefix in SHARED_SESSIONS:
        if nodeid.startswith(prefix):
            return prefix
    return nodeid.split("::", 1)[0]


T = TypeVar("T")


def slow_files_first(
    items: list[T], nodeid: Callable[[T], str], is_slow: Callable[[T], bool]
) -> list[T]:
    """Pure: ``items`` with the shared-session units first, then every unit holding
    a slow test, then the rest, each keeping its place within its group and its tests
    together."""
    units: dict[str, list[T]] = {}
    for item in items:
        units.setdefault(unit_of(nodeid(item)), []).append(item)
    shared = [u for u in units if u in SHARED_SESSIONS]
    slow = [u for u, tests in units.items() if u not in shared and any(map(is_slow, tests))]
    fast = [u for u in units if u not in shared and u not in slow]
    return [item for unit in (*shared, *slow, *fast) for item in units[unit]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = slow_files_first(
        items, lambda item: item.nodeid, lambda item: item.get_closest_marker("slow") is not None
    )


class _SharedSessionScheduling:
    """Registered only where xdist is loaded (its hook is unknown otherwise)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

        class SharedSessionScheduling(LoadScopeScheduling):  # type: ignore[misc]
            """xdist's loadfile, with :func:`unit_of` as the unit and the
            collection's order (slow files first) as the queue's order."""

            def _split_scope(self, nodeid: str) -> str:
                return unit_of(nodeid)

        config.option.loadscopereorder = False  # keep slow-first, not most-tests-first
        return SharedSessionScheduling(config, log)


TIMELINE_ENV = "ROCKETCLUSTER_TEST_TIMELINE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    path = os.environ.get(TIMELINE_ENV)
    started, cpu = time.time(), _cpu_seconds()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        used = _cpu_seconds() - cpu
        with open(path, "a", encoding="utf-8") as out:  # one short line: appends interleave whole
            out.write(f"{worker} {started:.3f} {time.time():.3f} cpu={used:.1f} {item.nodeid}\n")


def _cpu_seconds() -> float:
    """User and system CPU of this process and of every child it has reaped (their
    own reaped children included): a broker or a JVM a test started counts once the
    test stopped and waited for it."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("xdist"):
        config.pluginmanager.register(_SharedSessionScheduling(), "rocketcluster-test-order")
