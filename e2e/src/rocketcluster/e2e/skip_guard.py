"""A pytest plugin: a skip is not a pass. Every skipped test must be one the repository
allows to skip (``allowed-skips.toml`` at the root: a pattern of test ids and the
reason, for what cannot exist on this machine, such as a real Kubernetes cluster);
any other skip fails the session, and so does an allowed pattern whose tests ran
instead of skipping (the list would be stale). A missing tool or a broken set-up
therefore fails `make test` with its reason instead of passing quietly.

Loaded for every session by the root ``pyproject.toml`` (``-p
rocketcluster.e2e.skip_guard``); with pytest-xdist it judges on the controller, which
sees every worker's reports.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ALLOWED_FILE = "allowed-skips.toml"


@dataclass(frozen=True)
class Allowed:
    pattern: str  # fnmatch over test ids, e.g. "e2e/k8s/*[[]real]"
    reason: str


class AllowListError(ValueError):
    pass


def load_allowed(path: Path) -> list[Allowed]:
    """The allow list; a missing file allows nothing."""
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise AllowListError(f"{path}: {exc}") from exc
    out = []
    for i, entry in enumerate(data.get("skip", [])):
        pattern, reason = entry.get("tests"), entry.get("reason")
        if not isinstance(pattern, str) or not pattern or not isinstance(reason, str):
            raise AllowListError(f"{path}: [[skip]] #{i + 1} needs `tests` and `reason`")
        if not reason.strip():
            raise AllowListError(f"{path}: [[skip]] {pattern!r} gives no reason")
        out.append(Allowed(pattern, reason.strip()))
    return out


@dataclass
class Verdict:
    unexpected: list[tuple[str, str]] = field(default_factory=list)  # (test id, reason)
    stale: list[Allowed] = field(default_factory=list)  # ran although allowed to skip

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.stale


def judge(allowed: list[Allowed], reported: set[str], skipped: dict[str, str]) -> Verdict:
    """Pure: which skips are not allowed, and which allowed patterns matched tests this
    session reported on (``reported``) without any of them skipping."""
    verdict = Verdict()
    for test, reason in sorted(skipped.items()):
        if not any(fnmatch.fnmatchcase(test, a.pattern) for a in allowed):
            verdict.unexpected.append((test, reason))
    for a in allowed:
        mine = [t for t in reported if fnmatch.fnmatchcase(t, a.pattern)]
        if mine and not any(t in skipped for t in mine):
            verdict.stale.append(a)
    return verdict


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipGuard:
    def __init__(self, root: Path) -> None:
        self.path = root / ALLOWED_FILE
        self.allowed = load_allowed(self.path)
        self.reported: set[str] = set()  # every test a report came for
        self.skipped: dict[str, str] = {}
        self.verdict: Verdict | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reported.add(report.nodeid)
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.setdefault(report.nodeid, _reason(report))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if getattr(session.config, "workerinput", None) is not None:
            return  # an xdist worker: the controller judges
        if session.config.option.collectonly:
            return
        self.verdict = judge(self.allowed, self.reported, self.skipped)
        if not self.verdict.ok and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        verdict = self.verdict
        if verdict is None:
            return
        write = terminalreporter.write_line
        if verdict.ok:
            allowed = len(self.skipped)
            write(f"skip guard: {allowed} skipped, each allowed by {ALLOWED_FILE}")
            return
        terminalreporter.section("skip guard: a skip is not a pass", sep="=", red=True)
        for test, reason in verdict.unexpected:
            write(f"NOT ALLOWED TO SKIP {test}: {reason}", red=True)
        for a in verdict.stale:
            write(f"ALLOWED TO SKIP BUT RAN {a.pattern}: remove it from {self.path}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    try:
        guard = SkipGuard(Path(str(config.rootpath)))
    except AllowListError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.pluginmanager.register(guard, "rocketcluster-skip-guard")
