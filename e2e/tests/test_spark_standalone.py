"""The Spark standalone harness (rocketcluster.e2e.spark_standalone) against the real
thing: a Master and two Workers from the venv's pyspark, a PySpark driver that runs
an Arrow (``mapInPandas``) and a pickled Python UDF stage on them, and a stop that
leaves no process of the trees behind.

The driver runs in a process of its own: one Python process holds one SparkContext,
and the Spark jobs' tests keep a shared local session in theirs (an xdist worker may
run both files); ``getOrCreate`` would hand this test that session instead.

One cluster serves the module: the ``run`` fixture starts it, lets the driver work,
observes what runs (executors, their Python workers, peak memory, listening
sockets), then stops the cluster *while the application still runs* and records what
is left; the tests assert on those observations.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.e2e.kube import procfs
from rocketcluster.e2e.kube.processes import ProcessRecord, dying_with_parent, record, stop_groups
from rocketcluster.e2e.spark_standalone import (
    ExecutorPeak,
    StandaloneCluster,
    StandaloneClusterError,
    peak_rss_bytes,
)
from rocketcluster.jobs.session import JavaMissingError

pytestmark = pytest.mark.slow

ROWS = 64
PARTITIONS = 8

# The driver: a session from the jobs' own spark_session(), two executors awaited,
# then one query whose tasks report which executor JVM runs them (the executor is an
# ancestor of the Python worker: worker <- pyspark.daemon <- executor). It prints the
# rows as one JSON line and keeps the application running until stdin closes.
DRIVER = """
import json, os, sys
from pathlib import Path
from pyspark import TaskContext
from pyspark.sql.functions import udf
from rocketcluster.e2e.spark_standalone import EXECUTOR_CLASS, wait_for_executors
from rocketcluster.jobs.session import SparkSettings, spark_session


def executor_of_this_process():
    pid = os.getpid()
    while pid > 1:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\\0")
        if EXECUTOR_CLASS.encode() in argv:
            return pid, argv[argv.index(b"--executor-id") + 1].decode()
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no executor JVM above this Python worker")


def where(batches):
    pid, executor_id = executor_of_this_process()
    for batch in batches:
        yield batch.assign(
            executor_pid=pid,
            executor_id=executor_id,
            partition=TaskContext.get().partitionId(),
            python_pid=os.getpid(),
        )


spark = spark_session(SparkSettings(master=sys.argv[1]))


@udf("long")  # its DDL type is parsed at once: it needs the session
def square(x):
    return x * x


wait_for_executors(spark, 2)
schema = "id long, executor_pid long, executor_id string, partition int, python_pid long"
frame = spark.range(0, int(sys.argv[2]), numPartitions=int(sys.argv[3])).mapInPandas(where, schema)
rows = [r.asDict() for r in frame.withColumn("square", square("id")).collect()]
print(json.dumps({"rows": rows, "pyarrow": __import__("pyarrow").__version__}), flush=True)
sys.stdin.read()
spark.stop()
"""


@dataclass(frozen=True)
class Run:
    cluster: StandaloneCluster
    master_url: str
    state: dict[str, Any]
    rows: list[dict[str, Any]]
    workers: list[int]
    executors: dict[int, list[int]]
    peaks: list[ExecutorPeak]
    below_executors: dict[int, list[int]]  # executor pid -> its descendants
    tree: list[ProcessRecord]  # daemons and all below them before the stop; name: cmdline
    listening: dict[int, list[str]]  # pid -> addresses it listens on
    left_after_stop: list[ProcessRecord]


def _listening(pid: int) -> list[str]:
    """The TCP addresses ``pid`` listens on ("127.0.0.1:PORT"), from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            # /proc prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            if len(words) == 16 and words[:12] == b"\0" * 10 + b"\xff\xff":
                words = words[12:]  # an IPv4-mapped IPv6 address
            host = socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)
            found.append(f"{host}:{int(port, 16)}")
    return found


def _start_driver(master_url: str, directory: Path) -> tuple[subprocess.Popen[str], Path]:
    script = directory / "driver.py"
    script.write_text(DRIVER)
    log = directory / "driver.log"
    with log.open("w") as err:
        driver = subprocess.Popen(
            dying_with_parent(
                [sys.executable, str(script), master_url, str(ROWS), str(PARTITIONS)]
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=directory,
            start_new_session=True,
        )
    return driver, log


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    directory = tmp_path_factory.mktemp("spark-standalone")
    cluster = StandaloneCluster(directory / "cluster")
    driver: subprocess.Popen[str] | None = None
    try:
        cluster.start()
        master_url, state = cluster.master_url, cluster.master_state()
        driver, driver_log = _start_driver(master_url, directory)
        assert driver.stdout is not None
        line = driver.stdout.readline()
        if not line:
            pytest.fail(
                f"the driver exited ({driver.wait()}) without a result:\n"
                + driver_log.read_text()[-4000:]
                + "\n"
                + cluster.log_tails()
            )
        rows = json.loads(line)["rows"]
        workers = cluster.worker_pids()
        executors, peaks = cluster.executor_pids(), cluster.executor_peaks()
        below_executors = {e: procfs.descendants(e) for pids in executors.values() for e in pids}
        pids = cluster.daemon_pids()
        below = [child for pid in pids for child in procfs.descendants(pid)]
        tree = [record(pid, procfs.cmdline(pid)) for pid in [*pids, *below]]
        listening = {pid: _listening(pid) for pid in [*pids, *below] if procfs.cmdline(pid)}
        cluster.stop()  # the application still runs: executors and Python workers too
        left = [r for r in tree if r.alive()]
        cluster.stop()  # idempotent
        yield Run(
            cluster,
            master_url,
            state,
            rows,
            workers,
            executors,
            peaks,
            below_executors,
            tree,
            listening,
            left,
        )
    finally:
        cluster.stop()
        if driver is not None:
            stop_groups([record(driver.pid, "driver")], grace=10)
            driver.wait(timeout=10)


def test_the_master_reports_two_alive_workers_on_loopback(run: Run) -> None:
    assert run.state["url"] == run.master_url
    assert run.master_url.startswith("spark://127.0.0.1:")
    workers = run.state["workers"]
    assert [w["state"] for w in workers] == ["ALIVE", "ALIVE"]
    assert {(w["host"], w["cores"], w["memory"]) for w in workers} == {("127.0.0.1", 1, 1024)}


def test_tasks_run_on_executors_of_both_workers_with_python_workers(run: Run) -> None:
    # Every row came back, through Arrow (mapInPandas) and a pickled Python UDF.
    assert sorted(r["id"] for r in run.rows) == list(range(ROWS))
    assert all(r["square"] == r["id"] ** 2 for r in run.rows)
    assert {r["partition"] for r in run.rows} == set(range(PARTITIONS))
    # One executor JVM per Worker, each a child of its Worker, and both ran tasks.
    assert sorted(run.executors) == sorted(run.workers)
    assert all(len(pids) == 1 for pids in run.executors.values()), run.executors
    executor_pids = {pids[0] for pids in run.executors.values()}
    assert {r["executor_pid"] for r in run.rows} == executor_pids
    assert len({r["executor_id"] for r in run.rows}) == 2
    # The Python workers ran below the executors, not in the driver.
    below = {pid for e in executor_pids for pid in run.below_executors[e]}
    assert {r["python_pid"] for r in run.rows} <= below


def test_every_process_listens_on_loopback_only(run: Run) -> None:
    addresses = [a for found in run.listening.values() for a in found]
    assert addresses, run.listening  # the Master's RPC and web UI at least
    assert all(a.startswith("127.0.0.1:") for a in addresses), run.listening
    assert f"127.0.0.1:{run.master_url.rsplit(':', 1)[1]}" in addresses
    assert f"127.0.0.1:{run.cluster.webui_port}" in addresses


def test_peak_memory_of_each_executor_and_its_python_workers(run: Run) -> None:
    assert sorted(p.executor_pid for p in run.peaks) == sorted(
        pid for pids in run.executors.values() for pid in pids
    )
    for peak in run.peaks:
        assert peak.worker_pid in run.workers
        assert peak.jvm_peak_rss_bytes > 0
        assert peak.python_peak_rss_bytes > 0  # pyspark.daemon and its worker
    own = peak_rss_bytes(os.getpid())
    assert own is not None and own > 0
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert peak_rss_bytes(ended.pid) is None


def test_stop_leaves_no_process_of_the_trees_behind(run: Run) -> None:
    names = [r.name for r in run.tree]
    # What stop() had to end while the application ran: 3 daemons, 2 executors, and
    # each executor's PySpark daemon with its forked Python worker(s).
    assert sum("deploy.master.Master" in n for n in names) == 1
    assert sum("deploy.worker.Worker" in n for n in names) == 2
    assert sum("CoarseGrainedExecutorBackend" in n for n in names) == 2
    assert sum("pyspark.daemon" in n for n in names) >= 4
    assert run.left_after_stop == []
    assert run.cluster.daemon_pids() == []


def test_a_worker_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    cluster = StandaloneCluster(tmp_path / "cluster", workers=1, worker_memory="0")
    with pytest.raises(StandaloneClusterError) as failure:
        cluster.start()
    message = str(failure.value)
    assert "worker-1 (exit 1) exited while waiting for 1 workers" in message
    assert "Memory is below 1MB" in message  # the Worker's own words, from its log
    _assert_gone(message)
    assert cluster.daemon_pids() == []


def test_a_master_port_in_use_fails_with_its_log(tmp_path: Path) -> None:
    """Ports the caller fixes are not retried: the bind error reaches the caller."""
    with socket.socket() as taken, socket.socket() as free:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        free.bind(("127.0.0.1", 0))
        webui = free.getsockname()[1]
        free.close()
        cluster = StandaloneCluster(
            tmp_path / "cluster", master_port=taken.getsockname()[1], webui_port=webui
        )
        with pytest.raises(StandaloneClusterError) as failure:
            cluster.start()
    message = str(failure.value)
    assert "master (exit 1) exited" in message
    assert "Address already in use" in message
    _assert_gone(message)


def test_missing_java_fails_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="apt-get install openjdk-17-jre-headless"):
        StandaloneCluster(tmp_path / "cluster").start()
    assert not (tmp_path / "cluster").exists()


def _assert_gone(message: str) -> None:
    """Every PID the error names ("(pid N, …)") is gone."""
    pids = [int(part.split(",", 1)[0]) for part in message.split("(pid ")[1:]]
    assert pids, message
    assert [pid for pid in pids if procfs.cmdline(pid)] == []
