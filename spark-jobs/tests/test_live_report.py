"""End to end: a local cluster with a consumer that keeps up, one that falls behind and
one that stops, whose master is SIGKILLed midway; the health report read from the live
cluster (the ``rocketcluster`` data source) must tell each of them apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer as OfficialProducer

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.workload import TOPIC, Cluster, running
from rocketcluster.e2e.report_compare import comparable_run
from rocketcluster.e2e.spark_standalone import running_standalone_cluster
from rocketcluster.jobs import tables
from rocketcluster.jobs.config import JobsConfig
from rocketcluster.jobs.inputs import LiveCluster
from rocketcluster.jobs.pipeline import RunOutcome
from rocketcluster.jobs.report.browser import check_in_browser
from rocketcluster.jobs.run import ReportRequest, readable, run_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow

STATS_INTERVAL_S = 2.0
WINDOW_POINTS = 8


def _manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "health"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": 1,
                    "replicas": 3,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2},
                    "statsIntervalSeconds": STATS_INTERVAL_S,
                },
                "topics": [{"name": TOPIC, "queues": 2}],
                "consumerGroups": [{"name": "fast"}, {"name": "slow"}, {"name": "stopped"}],
            },
        }
    )


class _Thread:
    """A client loop in a daemon thread, stopped (and joined) on request."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        raise NotImplementedError


@dataclass
class Producer(_Thread):
    """The official producer at a steady ``rate`` (messages/s): a rate the fast consumer
    always keeps up with and the slow one never does, whatever the machine's load."""

    endpoints: str
    rate: float
    sent: int = 0

    def __post_init__(self) -> None:
        super().__init__()

    def _run(self) -> None:
        producer = OfficialProducer(
            ClientConfiguration(self.endpoints, Credentials(), request_timeout=3), (TOPIC,)
        )
        producer.startup()
        try:
            started = time.monotonic()
            while not self._stop.is_set():
                msg = Message()
                msg.topic = TOPIC
                msg.body = f"m{self.sent}".encode()
                try:
                    producer.send(msg)
                    self.sent += 1
                except Exception:
                    time.sleep(0.1)  # the failover: sends fail until the new master serves
                ahead = started + self.sent / self.rate - time.monotonic()
                if ahead > 0:
                    self._stop.wait(ahead)
        finally:
            producer.shutdown()


@dataclass
class Consumer(_Thread):
    """An official SimpleConsumer in a thread: ``pause_s`` after each acknowledgement
    makes it slow; ``stop()`` makes it a stopped consumer (its offset stays put)."""

    endpoints: str
    group: str
    pause_s: float = 0.0
    acked: int = 0

    def __post_init__(self) -> None:
        super().__init__()

    def _run(self) -> None:
        consumer = SimpleConsumer(
            ClientConfiguration(self.endpoints, Credentials(), request_timeout=3),
            self.group,
            {TOPIC: FilterExpression()},
            await_duration=2,
        )
        consumer.startup()
        try:
            while not self._stop.is_set():
                try:
                    messages = consumer.receive(4 if self.pause_s else 64, 20)
                except Exception:  # failover: the client retries on its own
                    time.sleep(0.2)
                    continue
                for msg in messages:
                    try:
                        consumer.ack(msg)
                        self.acked += 1
                    except Exception:
                        pass  # redelivered after the invisible time: still counted once
                    if self.pause_s:
                        time.sleep(self.pause_s)
        finally:
            consumer.shutdown()


@pytest.fixture(scope="module")
def scenario(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, dict[str, float]]]:
    directory = tmp_path_factory.mktemp("health")
    with running(directory / "cluster", _manifest()) as cluster:
        producer = Producer(cluster.endpoints, rate=40.0)
        consumers = {
            "fast": Consumer(cluster.endpoints, "fast"),
            # ~2 acks/s against ~20 sends/s a queue: lag grows in every 2 s interval
            # unless the producer stalls for most of one (it did, at 0.2 s a pause, on
            # a loaded 2-core machine, and the slow group read as OK).
            "slow": Consumer(cluster.endpoints, "slow", pause_s=0.5),
            "stopped": Consumer(cluster.endpoints, "stopped"),
        }
        marks: dict[str, float] = {}
        producer.start()
        for c in consumers.values():
            c.start()
        try:
            time.sleep(8)
            consumers["stopped"].stop()
            marks["stopped"] = time.time()
            time.sleep(4)
            victim = cluster.master()
            marks["killed"] = time.time()
            cluster.runtime.kill(victim["name"])
            cluster.master(exclude={victim["name"]})
            # The lag window (WINDOW_POINTS snapshots) must lie after the failover:
            # a new master's view of offsets starts where replication left them.
            time.sleep(STATS_INTERVAL_S * (WINDOW_POINTS + 6))
        finally:
            producer.stop()
            for c in consumers.values():
                c.stop()
        marks["end"] = time.time()
        yield cluster, marks


CONFIG = JobsConfig(window_points=WINDOW_POINTS, min_age_hours=0.0)


def _controllers(cluster: Cluster) -> list[str]:
    return [f"http://{p['addresses']['admin']}" for p in cluster.controllers()]


@pytest.fixture(scope="module")
def local_run(
    spark: SparkSession,
    scenario: tuple[Cluster, dict[str, float]],
    tmp_path_factory: pytest.TempPathFactory,
) -> RunOutcome:
    """The report of the scenario in local[2], as of its end."""
    cluster, marks = scenario
    request = ReportRequest(
        out=tmp_path_factory.mktemp("local") / "reports",
        live=LiveCluster(_controllers(cluster)),
        config=CONFIG,
        history_hours=1.0,
        save_inputs=True,
        cluster="health",
        now_ms=int(marks["end"] * 1000),
    )
    return run_report(request)


def test_the_report_tells_slow_stopped_and_failover_apart(
    scenario: tuple[Cluster, dict[str, float]], local_run: RunOutcome, tmp_path: Path
) -> None:
    cluster, marks = scenario
    config = CONFIG
    outcome = local_run
    groups = outcome.results[tables.LAG_GROUPS].set_index("consumer_group")
    assert groups.loc["fast", "status"] == "OK", groups.loc["fast", "reason"]
    assert groups.loc["slow", "status"] == "WARN", groups.loc["slow", "reason"]
    assert groups.loc["stopped", "status"] == "STOP", groups.loc["stopped", "reason"]
    assert groups.loc["slow", "lag_messages"] > 0
    assert groups.loc["stopped", "max_lag_ms"] > 0

    sss = outcome.results[tables.SSS_GROUPS].set_index("broker_group")
    row = sss.loc[cluster.group]
    assert row["elections"] >= 2  # the first master, and the one after the kill
    assert row["master_changes"] >= 1
    assert row["time_without_master_ms"] > 0
    assert row["unclean_elections"] == 0
    masters = outcome.results[tables.SSS_MASTERS]
    after_kill = masters[masters["start"] >= marks["killed"] * 1000 - 5000]
    assert not after_kill.empty, masters

    candidates = outcome.results[tables.TIERING_CANDIDATES]
    assert (candidates["topic"] == TOPIC).any(), candidates

    summary = json.loads((outcome.directory / "summary.json").read_text())
    assert summary["meta"]["cluster"] == "health"
    html = outcome.report.read_text()
    for text in ("slow", "stopped", "WARN", "STOP", cluster.group):
        assert text in html
    # What a person opens: real headless Chromium, no errors, every plot drawn. Set
    # ROCKETCLUSTER_REPORT_SCREENSHOT to keep the picture (spark-jobs/docs/ has one).
    shot = Path(os.environ.get("ROCKETCLUSTER_REPORT_SCREENSHOT", tmp_path / "report.png"))
    seen = check_in_browser(outcome.report, shot)
    assert seen.ok, seen
    wanted = {"lag-messages", "lag-time", f"sss-timeline-{cluster.group}", "tiering-savings"}
    assert wanted <= set(seen.plots_rendered), seen
    lines = readable(outcome)
    assert any("stopped: STOP" in line for line in lines), lines
    # The inputs were saved: the same report reruns from the snapshot.
    rerun = run_report(
        ReportRequest(
            out=tmp_path / "rerun",
            inputs=outcome.directory / "inputs",
            config=config,
            history_hours=1.0,
            now_ms=int(marks["end"] * 1000),
        )
    )
    again = rerun.results[tables.LAG_GROUPS].set_index("consumer_group")
    assert again["status"].to_dict() == groups["status"].to_dict()


@pytest.mark.timeout(900)  # ~90 s idle: three cold JVMs; several times that in a full suite
def test_a_standalone_cluster_gives_the_same_report(
    scenario: tuple[Cluster, dict[str, float]], local_run: RunOutcome, tmp_path: Path
) -> None:
    """The same live cluster read by executors of a Spark standalone cluster (a master
    and two workers, each a process) through ``rocketctl report --master spark://…``:
    the same report, table for table, as local[2]'s."""
    cluster, marks = scenario
    config = tmp_path / "jobs.yaml"
    config.write_text(f"windowPoints: {WINDOW_POINTS}\nminAgeHours: 0\n")
    out = tmp_path / "reports"
    with running_standalone_cluster(tmp_path / "spark") as spark_cluster:
        command = [sys.executable, "-m", "rocketcluster.jobs.run", "--json"]
        command += ["--master", spark_cluster.master_url, "--cluster", "health"]
        command += ["--history-hours", "1", "--config", str(config), "--out", str(out)]
        command += ["--now", str(int(marks["end"] * 1000))]
        for url in _controllers(cluster):
            command += ["--controller", url]
        done = subprocess.run(command, capture_output=True, timeout=840, check=False)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        # The work ran on the workers: each started an executor for the application.
        apps = spark_cluster.master_state()["completedapps"]
        assert [a["name"] for a in apps] == ["rocketcluster-health"], apps
    assert comparable_run(out / "latest") == comparable_run(local_run.directory)
