"""A real Spark standalone cluster for tests and benchmarks: one Master and N Workers,
each its own process started from the pyspark distribution in this virtualenv
(``pyspark/bin/spark-class``), on loopback only, every file under one directory, and
stopped by PID.

Facts this rests on, each checked against PySpark 4.3's distribution:

- **No start scripts.** The wheel ships ``bin/spark-class`` but not
  ``sbin/start-master.sh`` / ``start-worker.sh`` (its ``sbin`` has only the history and
  Connect servers). ``spark-class`` runs the launcher and then ``exec``\\s the JVM, so
  the PID we start is the daemon's JVM.
- **Ports.** The Master takes ``--port`` and ``--webui-port`` (chosen free here);
  Workers take port 0 for both (the kernel picks). Spark silently moves to the next
  port when one is taken (``spark.port.maxRetries``); that is set to 0, so a port
  another test took in the meantime fails the Master's start, which is then retried
  on fresh ports, and the URL we report is the one it listens on. The Master's REST
  submission server (fixed port 6066, on by default) is switched off: parallel
  clusters would fight over it.
- **Readiness** is the Master's own view: ``GET http://127.0.0.1:<webui>/json/`` says
  ``"status": "ALIVE"`` and lists each registered worker with ``"state": "ALIVE"``;
  :meth:`StandaloneCluster.start` returns once as many workers are ALIVE as were
  asked for (any process exiting first fails the start at once).
- **Configuration** comes from our own ``SPARK_CONF_DIR`` (no ``spark-env.sh`` or
  ``spark-defaults.conf`` of the machine is read): ``spark-defaults.conf`` with the
  settings above and ``log4j2.properties``, a copy of the health jobs' own, so
  daemons *and* executors (their class path starts with the Worker's conf dir) log
  errors only, into files under the directory.
- **Process trees.** Each daemon runs in a session of its own and is SIGKILLed by
  the kernel if the thread that started it dies (``setpriv --pdeathsig``). A
  Worker's executors (``CoarseGrainedExecutorBackend``) are its children, in its
  group; an executor's PySpark daemon (``pyspark.daemon``) moves to a group of its
  own (``setpgid(0, 0)``) with the Python workers it forks, but stays in the
  session. :meth:`StandaloneCluster.stop` therefore signals every process group
  found in the daemons' sessions, then SIGKILLs by PID anything still in them.
  Should the caller die instead, the executors follow their Worker (Spark's
  ``WorkerWatcher`` ends an executor whose Worker is gone) and the PySpark daemons
  their executor (their stdin closes).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from rocketcluster.api.cluster import SPARK_DRIVER_JVM_OPTIONS
from rocketcluster.e2e.kube import procfs
from rocketcluster.e2e.kube.processes import ProcessRecord, dying_with_parent, record, stop_groups
from rocketcluster.jobs.session import find_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "EXECUTOR_CLASS",
    "ExecutorPeak",
    "StandaloneCluster",
    "StandaloneClusterError",
    "peak_rss_bytes",
    "running_standalone_cluster",
    "wait_for_executors",
]

HOST: Final = "127.0.0.1"
MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# The health jobs' log configuration: the one file Spark's logging is tuned in.
JOBS_LOG4J2: Final = "log4j2.properties"
DAEMON_MEMORY: Final = "256m"  # Master and Worker only schedule; executors have their own
STOP_GRACE_S: Final = 15.0
START_ATTEMPTS: Final = 3
_BIND_FAILURE: Final = ("BindException", "Address already in use", "Failed to bind")


class StandaloneClusterError(RuntimeError):
    """The cluster did not come up (the message carries the processes' log tails), or
    it was used in a state that does not allow it."""


def _pyspark_home() -> Path:
    """The pyspark package directory, which is a Spark distribution (bin/, jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StandaloneClusterError("pyspark is not installed in this environment")
    return Path(spec.origin).parent


def _jobs_log_config() -> Path:
    spec = importlib.util.find_spec("rocketcluster.jobs")
    if spec is None or not spec.submodule_search_locations:
        raise StandaloneClusterError("rocketcluster.jobs (spark-jobs) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / JOBS_LOG4J2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


def _session_members(sessions: set[int]) -> list[tuple[int, int]]:
    """(pid, process group) of every running process in one of ``sessions``. A
    session ID is never reused while a member lives, so this is safe to signal."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                state, pgid, sid = fields[0], int(fields[2]), int(fields[3])
                if sid in sessions and state not in procfs.GONE:
                    members.append((int(entry.name), pgid))
    return members


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set size so far (``VmHWM`` in /proc/<pid>/status),
    in bytes; None when the process is gone (read it before the process ends: for an
    executor, before the application stops)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            value, unit = line.split()[1:3]
            assert unit == "kB", line
            return int(value) * 1024
    return None  # a zombie has no memory lines


@dataclass(frozen=True)
class ExecutorPeak:
    """One executor at the moment of sampling: its JVM's peak RSS, and the sum of
    the peaks of the Python processes below it (PySpark's daemon and its workers,
    which live as long as the executor with ``spark.python.worker.reuse``)."""

    worker_pid: int
    executor_pid: int
    jvm_peak_rss_bytes: int
    python_peak_rss_bytes: int


@dataclass(frozen=True)
class _Daemon:
    name: str  # "master", "worker-1", …
    process: subprocess.Popen[bytes]
    record: ProcessRecord
    log: Path


@dataclass
class StandaloneCluster:
    """A Master and ``workers`` Workers under ``directory`` (conf/, logs/, work/,
    local/, tmp/), each Worker offering ``worker_cores`` cores and ``worker_memory``
    (Spark's size syntax, e.g. ``1g``) to applications.

    An executor gets ``spark.executor.memory`` (default 1g) out of its Worker's
    memory and, in standalone mode, all of its Worker's cores by default: with the
    defaults here each Worker runs one 1g executor per application.

    Start it from a thread that outlives it (the main thread, or a fixture's): the
    daemons are tied to the starting thread's life (``PR_SET_PDEATHSIG``).
    """

    directory: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    start_timeout_s: float = 120.0
    master_port: int = 0
    webui_port: int = 0
    _daemons: list[_Daemon] = field(default_factory=list, init=False, repr=False)
    _choose_ports: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Ports the caller fixed are used as given (and not retried); else fresh ones
        # at every start. Readiness is read from the web UI: both or neither.
        if bool(self.master_port) != bool(self.webui_port):
            raise ValueError("give both master_port and webui_port, or neither")
        self._choose_ports = not self.master_port

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``, for ``--master`` / ``SparkSettings.master``."""
        if not self.master_port:
            raise StandaloneClusterError("the cluster has not been started")
        return f"spark://{HOST}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def master_pid(self) -> int:
        return self._daemon("master").process.pid

    def worker_pids(self) -> list[int]:
        return [d.process.pid for d in self._daemons if d.name.startswith("worker-")]

    def daemon_pids(self) -> list[int]:
        """Every process this cluster started itself (Master first)."""
        return [d.process.pid for d in self._daemons]

    # -- start ---------------------------------------------------------------------

    def start(self) -> StandaloneCluster:
        """Start the Master, then the Workers, and wait until the Master reports every
        Worker ALIVE. On failure everything started is stopped again and the error
        carries the log tails. A missing Java fails first, with the install hint."""
        if self._daemons:
            raise StandaloneClusterError("the cluster is already running")
        find_java()  # JavaMissingError, with the install hint, before anything starts
        self._prepare_directory()
        try:
            self._start_master()
            for index in range(1, self.workers + 1):
                self._start_worker(index)
            self._wait_for_workers(time.monotonic() + self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare_directory(self) -> None:
        for sub in ("conf", "logs", "work", "local", "tmp"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        conf = self.directory / "conf"
        shutil.copyfile(_jobs_log_config(), conf / "log4j2.properties")
        defaults = {
            # A taken port fails the start (and we retry) instead of Spark quietly
            # listening one port further than the URL we hand out.
            "spark.port.maxRetries": "0",
            # The REST submission server listens on fixed port 6066 by default.
            "spark.master.rest.enabled": "false",
        }
        (conf / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in defaults.items())
        )

    def _environment(self) -> dict[str, str]:
        """The daemons' environment: the caller's, without any Spark settings it may
        carry (they would configure the wrong cluster), plus ours. Executors inherit it
        from their Worker."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SPARK_", "PYSPARK_"))
        }
        java_options = (
            f"-Djava.io.tmpdir={self.directory / 'tmp'}",
            "-XX:-UsePerfData",  # no /tmp/hsperfdata_<user>/<pid> file
            *SPARK_DRIVER_JVM_OPTIONS,  # the daemons only schedule: start fast, stay small
        )
        env.update(
            SPARK_HOME=str(_pyspark_home()),
            SPARK_CONF_DIR=str(self.directory / "conf"),
            SPARK_LOCAL_IP=HOST,
            SPARK_LOCAL_DIRS=str(self.directory / "local"),
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_DAEMON_JAVA_OPTS=" ".join(java_options),
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, name: str, args: Sequence[str]) -> _Daemon:
        spark_class = _pyspark_home() / "bin" / "spark-class"
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                dying_with_parent([str(spark_class), *args]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=self._environment(),
                start_new_session=True,
            )
        daemon = _Daemon(name, process, record(process.pid, f"spark-{name}"), log)
        self._daemons.append(daemon)
        return daemon

    def _start_master(self) -> None:
        chosen = self._choose_ports
        for attempt in range(1, (START_ATTEMPTS if chosen else 1) + 1):
            if chosen:
                self.master_port, self.webui_port = _free_port(), _free_port()
            master = self._spawn(
                "master",
                [
                    MASTER_CLASS,
                    "--host",
                    HOST,
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(self.webui_port),
                ],
            )
            try:
                self._wait(
                    time.monotonic() + self.start_timeout_s,
                    lambda state: state.get("status") == "ALIVE",
                    "the Master to serve its state",
                )
                return
            except StandaloneClusterError:
                taken = any(s in _tail(master.log, 200) for s in _BIND_FAILURE)
                if not (chosen and taken) or attempt == START_ATTEMPTS:
                    raise
                self._stop_daemons([master])
                self._daemons.remove(master)

    def _start_worker(self, index: int) -> None:
        work = self.directory / "work" / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        self._spawn(
            f"worker-{index}",
            [
                WORKER_CLASS,
                "--host",
                HOST,
                "--port",
                "0",
                "--webui-port",
                "0",
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                "--work-dir",
                str(work),
                self.master_url,
            ],
        )

    def master_state(self) -> dict[str, Any]:
        """The Master's JSON state (workers, applications, cores, memory)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def _wait_for_workers(self, deadline: float) -> None:
        def all_alive(state: dict[str, Any]) -> bool:
            alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            return len(alive) >= self.workers

        self._wait(deadline, all_alive, f"{self.workers} workers to register ALIVE")

    def _wait(self, deadline: float, ready: Any, what: str) -> None:
        """Poll the Master's state until ``ready(state)``; fail as soon as one of our
        processes has exited, or at ``deadline``, with every log's tail."""
        last: object = "no answer yet"
        while True:
            exited = [d for d in self._daemons if d.process.poll() is not None]
            if exited:
                names = ", ".join(f"{d.name} (exit {d.process.returncode})" for d in exited)
                raise StandaloneClusterError(
                    f"Spark standalone: {names} exited while waiting for {what}\n"
                    + self.log_tails()
                )
            try:
                state = self.master_state()
                if state.get("url") == self.master_url and ready(state):
                    return
                last = {k: state.get(k) for k in ("url", "status", "aliveworkers")}
            except (OSError, ValueError) as exc:  # not listening yet / half-written JSON
                last = exc
            if time.monotonic() > deadline:
                raise StandaloneClusterError(
                    f"Spark standalone: gave up waiting for {what} after "
                    f"{self.start_timeout_s:.0f}s (master at {self.webui_url}/json/ last "
                    f"said: {last})\n" + self.log_tails()
                )
            time.sleep(0.25)

    def log_tails(self, lines: int = 25) -> str:
        """The last lines of each daemon's log (stdout and stderr of the JVM)."""
        return "\n".join(
            f"--- {d.name} (pid {d.process.pid}, {d.log}) ---\n{_tail(d.log, lines)}"
            for d in self._daemons
        )

    # -- processes below the daemons ----------------------------------------------

    def executor_pids(self) -> dict[int, list[int]]:
        """Each Worker's PID and the executor JVMs it runs now (its children running
        ``CoarseGrainedExecutorBackend``; one per application with the defaults)."""
        children: dict[int, list[int]] = {}
        for stat in procfs.stats():
            if stat.running:
                children.setdefault(stat.ppid, []).append(stat.pid)
        return {
            worker: [
                pid for pid in children.get(worker, []) if EXECUTOR_CLASS in procfs.cmdline(pid)
            ]
            for worker in self.worker_pids()
        }

    def executor_peaks(self) -> list[ExecutorPeak]:
        """Peak RSS of every executor running now (see :func:`peak_rss_bytes`)."""
        peaks = []
        for worker, executors in self.executor_pids().items():
            for executor in executors:
                jvm = peak_rss_bytes(executor)
                if jvm is None:
                    continue
                python = sum(peak_rss_bytes(pid) or 0 for pid in procfs.descendants(executor))
                peaks.append(ExecutorPeak(worker, executor, jvm, python))
        return peaks

    # -- stop ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this cluster started and everything below them (executors,
        their Python daemons and workers), SIGTERM then SIGKILL, and reap the daemons.
        Idempotent; raises if something survived (it should never)."""
        daemons, self._daemons = self._daemons, []
        self._stop_daemons(daemons)

    def _stop_daemons(self, daemons: list[_Daemon]) -> None:
        """Every process group in the daemons' sessions gets SIGTERM, then SIGKILL
        (:func:`stop_groups`); then whatever is still in those sessions gets SIGKILL
        by PID: a process that left its group (``pyspark.daemon``) or its parent
        (re-parented when the executor died) stays in its session."""
        if not daemons:
            return
        sessions = {d.process.pid for d in daemons}  # each leads its own (setsid)
        groups = {pgid for _, pgid in _session_members(sessions)}
        groups.update(d.process.pid for d in daemons if d.record.alive())
        stop_groups([record(pgid, "spark") for pgid in groups], STOP_GRACE_S)
        deadline = time.monotonic() + 5.0
        while (left := _session_members(sessions)) and time.monotonic() < deadline:
            for pid, _ in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        for daemon in daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=5)
        if left:
            found = ", ".join(f"pid {pid}: {procfs.cmdline(pid)[:80]}" for pid, _ in left)
            raise StandaloneClusterError(f"Spark standalone: still running after stop: {found}")

    def _daemon(self, name: str) -> _Daemon:
        for daemon in self._daemons:
            if daemon.name == name:
                return daemon
        raise StandaloneClusterError(f"no running {name}")

    def __enter__(self) -> StandaloneCluster:
        return self.start() if not self._daemons else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for_executors(spark: SparkSession, count: int, timeout_s: float = 120.0) -> None:
    """Block until ``count`` executors have registered with the driver of ``spark``.

    A session against a standalone master returns before its executors exist; the
    first stage then runs on whichever registered first. Call this before work that
    must spread over the cluster, or before timing "after Spark is up"."""
    deadline = time.monotonic() + timeout_s
    context = spark.sparkContext._jsc.sc()  # the Scala SparkContext (py4j)
    while True:
        # Block managers: the executors' and the driver's own.
        registered = int(context.getExecutorMemoryStatus().size()) - 1
        if registered >= count:
            return
        if time.monotonic() > deadline:
            raise StandaloneClusterError(
                f"only {registered} of {count} executors registered within {timeout_s:.0f}s "
                f"(master {spark.sparkContext.master}); the Workers' logs say why"
            )
        time.sleep(0.2)


@contextlib.contextmanager
def running_standalone_cluster(
    directory: Path, workers: int = 2, worker_cores: int = 1, worker_memory: str = "1g"
) -> Iterator[StandaloneCluster]:
    """A started cluster for the block, stopped after it: what a (module-scoped)
    pytest fixture or a benchmark wraps."""
    with StandaloneCluster(
        directory, workers=workers, worker_cores=worker_cores, worker_memory=worker_memory
    ) as cluster:
        yield cluster
