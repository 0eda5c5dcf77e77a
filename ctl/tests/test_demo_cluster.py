"""What `make demo` shows a newcomer: `rocketctl demo cluster` run once for real (the
console script, as a user runs it) — its story told in order, nothing on stderr, and
its processes gone afterwards; `--json` checked on the quick standalone demo, which
shares the same output path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketcluster.ctl.local.runtime import LocalRuntime

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ROCKETCTL = Path(sys.executable).parent / "rocketctl"

# The story in order, one pattern per step (each a whole line).
CLUSTER_STORY = [
    r"starting prod from examples/cluster\.yaml: 3 controllers, "
    r"2 broker groups x 3 replicas \.\.\.",
    r"ready in [\d.]+ s: 10 processes; clients connect to prod-broker-0 at [\d.]+:\d+, "
    r"prod-broker-1 at [\d.]+:\d+",
    r"prod-broker-0: master prod-broker-0-\d \(epoch \d+\), SyncStateSet 3/3",
    r"prod-broker-1: master prod-broker-1-\d \(epoch \d+\), SyncStateSet 3/3",
    r"producing to topic orders with the official RocketMQ 5 Python client \(2 producers\): "
    r"[\d,]+ acknowledged in [\d.]+ s",
    r"SIGKILL (?P<killed>prod-broker-0-\d), the master of prod-broker-0, .*",
    r"new master (?P<new>prod-broker-0-\d) serving after [\d.]+ s \(epoch \d+; .+\)",
    r"the producers saw (no failed send|[\d,]+ failed sends? ).*",
    r"prod-broker-0: master (?P=new) \(epoch \d+\), SyncStateSet [12]/3 \((?P=killed) stays down\)",
    r"(?P<acked>[\d,]+) acknowledged, (?P<read>[\d,]+) read back with a consumer group, lost 0.*",
]
CLUSTER_END = [
    r"stopped 9 processes; logs stay in .+",
    r"verdict: nothing lost: every acknowledged message was read back",
    r"see it in the web console: \.venv/bin/rocketctl local up -f examples/cluster\.yaml "
    r"--dir \.rocketcluster",
    r"  then \.venv/bin/rocketctl console --dir \.rocketcluster and open http://localhost:8090/",
]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    directory: Path


def _rocketctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROCKETCTL), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


@pytest.fixture(scope="session")
def cluster_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One real run of the demo `make demo` runs (slow: a 10-process cluster)."""
    directory = tmp_path_factory.mktemp("demo") / "cluster"
    try:
        done = _rocketctl("demo", "cluster", "--dir", str(directory))
        yield Run(done.returncode, done.stdout, done.stderr, directory)
    finally:
        LocalRuntime(directory).down()  # by pid, should the demo have left any
        shutil.rmtree(directory, ignore_errors=True)


def test_the_demo_tells_its_story_in_order(cluster_demo: Run) -> None:
    assert cluster_demo.returncode == 0, cluster_demo.stdout + cluster_demo.stderr
    lines = cluster_demo.stdout.splitlines()
    # the steps in order; an optional client-library line may sit before the end
    assert len(lines) >= len(CLUSTER_STORY) + len(CLUSTER_END), cluster_demo.stdout
    story, rest = lines[: len(CLUSTER_STORY)], lines[len(CLUSTER_STORY) :]
    found: dict[str, str] = {}
    for step, line in zip(CLUSTER_STORY, story, strict=True):
        pattern = step  # names seen on earlier lines must come back with the same value
        for name, value in found.items():
            pattern = pattern.replace(f"(?P={name})", re.escape(value))
        match = re.fullmatch(pattern, line)
        assert match, f"expected /{pattern}/, got {line!r} in:\n{cluster_demo.stdout}"
        found.update(match.groupdict())
    if rest and rest[0].startswith("the client library logged "):
        assert re.fullmatch(r"the client library logged .+ x\d.*; whole lines in .+", rest[0])
        rest = rest[1:]
    assert len(rest) == len(CLUSTER_END), cluster_demo.stdout
    for pattern, line in zip(CLUSTER_END, rest, strict=True):
        assert re.fullmatch(pattern, line), f"expected /{pattern}/, got {line!r}"
    assert found["new"] != found["killed"]
    # everything acknowledged was read back (a send the client gave up on may be there too)
    assert int(found["read"].replace(",", "")) >= int(found["acked"].replace(",", "")) > 0


def test_the_demo_is_a_few_readable_lines_and_stderr_stays_clean(cluster_demo: Run) -> None:
    lines = cluster_demo.stdout.splitlines()
    assert len(lines) <= 15
    assert all(len(line) <= 200 for line in lines), max(lines, key=len)
    assert not cluster_demo.stdout.lstrip().startswith("{")  # no JSON dump
    # no tracebacks and no client-library lines: those are counted, not printed
    assert cluster_demo.stderr == "", cluster_demo.stderr


def test_the_demo_stops_what_it_started(cluster_demo: Run) -> None:
    runtime = LocalRuntime(cluster_demo.directory)
    assert runtime.state() is None and runtime.running() == []
    assert (cluster_demo.directory / "logs").is_dir()  # kept for whoever wants to look
    assert not (cluster_demo.directory / "data").exists()  # hundreds of MB: gone after a pass


def test_json_prints_the_report_alone(tmp_path: Path) -> None:
    directory = tmp_path / "standalone"
    try:
        done = _rocketctl("demo", "standalone", "--dir", str(directory), "--count", "20", "--json")
    finally:
        LocalRuntime(directory).down()
        shutil.rmtree(directory, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert report["produced"] == 20 and report["missing"] == 0 and report["problems"] == []
    assert {"total", "levels", "kinds", "examples", "clientLog"} <= set(
        report["clientLibraryErrors"]
    )
    assert done.stderr == ""


def test_a_manifest_the_demo_cannot_use_is_refused_with_what_to_change(tmp_path: Path) -> None:
    done = _rocketctl(
        "demo", "cluster", "-f", "examples/standalone.yaml", "--dir", str(tmp_path / "c")
    )
    assert done.returncode == 1
    assert "brokers.replicas must be 2 or more" in done.stderr
    assert "examples/cluster.yaml can" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "c").exists()  # nothing was started
