"""LocalRuntime: start, inspect and stop a manifest's processes on this machine.

``up`` renders one config file per process (the same model the operator renders),
starts each process in its own session with its log in ``DIR/logs``, waits until
every one answers ``/readyz`` and writes ``DIR/cluster.json``: the client endpoints
and, per process, its name, pid, role and addresses. ``down`` stops exactly the
processes recorded there, by pid, after checking each pid still runs our command.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api.broker_config import (
    ADMIN_PORT,
    CLIENT_PORT,
    CONTROLLER_PORT,
    HA_PORT,
    BrokerProcessConfig,
)
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.api.tiered_spec import TieredBackend
from rocketcluster.api.tls import ClientTls, TlsFiles, admin_scheme, http_verify
from rocketcluster.ctl.local.addresses import claim, end_lease, lease
from rocketcluster.ctl.local.auth import prepare_local_auth
from rocketcluster.ctl.local.plan import ProcessPlan, ProxyConfig, hosts_needed, plan_cluster
from rocketcluster.ctl.local.state import LocalClusterState

STATE_FILE = "cluster.json"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


class LocalRuntimeError(RuntimeError):
    pass


def _owned(pid: int, marker: str) -> bool:
    """True when ``pid`` is alive and still runs the command we started (pids are
    reused: never signal a process on the pid alone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


FRONT_MARKER = "rocketcluster.broker.front"


def children_of(pid: int, marker: str) -> list[int]:
    """The live children of ``pid`` whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and _owned(int(entry.name), marker):
            found.append(int(entry.name))
    return sorted(found)


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalRuntime:
    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        # The processes this object started, by name: whether one of them exited is
        # then its own exit status, not a read of /proc/<pid>/cmdline (which a loaded
        # machine was seen to answer empty for a live, starting process).
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def state(self) -> dict[str, Any] | None:
        if not self.state_path.exists():
            return None
        data: dict[str, Any] = json.loads(self.state_path.read_text())
        return data

    def cluster_state(self) -> LocalClusterState | None:
        """``cluster.json`` typed (local/state.py); None when no cluster is recorded, a
        LocalStateError naming the file and the field when it cannot be read."""
        if not self.state_path.exists():
            return None
        return LocalClusterState.load(self.state_path)

    def client_tls(self) -> ClientTls | None:
        """What rocketctl presents and trusts to reach the recorded cluster: its CA and
        client certificate when the cluster runs TLS, else None."""
        return client_tls(self.state())

    def running(self) -> list[dict[str, Any]]:
        state = self.state() or {"processes": []}
        return [p for p in state["processes"] if _owned(p["pid"], p["configPath"])]

    # -- up ------------------------------------------------------------------

    def up(
        self,
        manifest: Path | RocketCluster,
        *,
        overrides: dict[str, Any] | None = None,
        controller_overrides: dict[str, Any] | None = None,
        timeout: float = READY_TIMEOUT_S,
        hosts: list[str] | None = None,
        argv_prefix: Callable[[ProcessPlan], list[str]] | None = None,
    ) -> dict[str, Any]:
        """Start every process of ``manifest`` and wait until each is ready.

        ``hosts`` (one address per process, in plan order: controllers, brokers, then
        the group endpoints) replaces the loopback allocation, and ``argv_prefix``
        wraps a process's command: the chaos suite runs each process in its own
        network namespace on that namespace's address."""
        cluster = load_manifest(manifest) if isinstance(manifest, Path) else manifest
        if self.running():
            raise LocalRuntimeError(
                f"a cluster is already running from {self.directory}; "
                f"run `rocketctl local down --dir {self.directory}` first"
            )
        for sub in ("config", "logs", "data"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        if hosts is None:
            taken = {p["host"] for p in (self.state() or {}).get("processes", [])}
            # Held until every process listens: another cluster starting meanwhile
            # must not pick the same addresses (addresses.py).
            with claim(
                hosts_needed(cluster),
                [CLIENT_PORT, ADMIN_PORT, HA_PORT, CONTROLLER_PORT],
                taken,
                start=_start_block(self.directory),
            ) as picked:
                state = self._launch(
                    cluster, picked.hosts, overrides, controller_overrides, timeout, argv_prefix
                )
                # Kept from other clusters while ours is recorded, killed processes
                # included (addresses.py); `down` gives them back.
                lease(picked.hosts, self.state_path.resolve())
                return state
        if len(hosts) != hosts_needed(cluster):
            raise LocalRuntimeError(
                f"{cluster.name} needs {hosts_needed(cluster)} host addresses, got {len(hosts)}"
            )
        return self._launch(cluster, hosts, overrides, controller_overrides, timeout, argv_prefix)

    def _launch(
        self,
        cluster: RocketCluster,
        hosts: list[str],
        overrides: dict[str, Any] | None,
        controller_overrides: dict[str, Any] | None,
        timeout: float,
        argv_prefix: Callable[[ProcessPlan], list[str]] | None,
    ) -> dict[str, Any]:
        """Start ``cluster``'s processes on ``hosts`` and wait until each is ready."""
        auth = prepare_local_auth(cluster, self.directory)
        if auth is not None:  # security.auth: the processes read DIR/auth/ (local/auth.py)
            overrides = {"auth": auth, **(overrides or {})}
            controller_overrides = {"auth": auth, **(controller_overrides or {})}
        plans = plan_cluster(cluster, self.directory, hosts, overrides, controller_overrides)
        tls = None
        if cluster.spec.security.tls.enabled:
            # Imported here: it needs `cryptography`, which the broker image (whose
            # rocketctl only talks to a running cluster) does not carry.
            from rocketcluster.ctl.local.tls import issue_local_tls

            tls = issue_local_tls(self.directory, plans)
        for plan in plans:
            if auth is not None and isinstance(plan.config, ProxyConfig):
                plan.config.admin_token_file = str(auth.admin_token_file)
        for tier in own_tier_directories(plans, self.directory):
            tier.mkdir(parents=True, exist_ok=True)
        if argv_prefix is not None:
            for plan in plans:
                plan.argv_prefix = argv_prefix(plan)
        records: list[dict[str, Any]] = []
        state: dict[str, Any] = {
            "name": cluster.name,
            "directory": str(self.directory),
            "processes": records,
            # rocketctl's own certificate and the CA (point clients at tls.caFile).
            "tls": tls.model_dump(mode="json", by_alias=True) if tls is not None else None,
        }
        try:
            for plan in plans:
                records.append(self._start(plan))
                self._save(state)
            self._wait_ready(plans, records, timeout)
        except BaseException:
            self.down()
            raise
        state["clientEndpoints"] = ";".join(e for p in plans for e in p.client_endpoints)
        state["controllers"] = ";".join(
            p.config.member(p.config.node_id).raft_address
            for p in plans
            if isinstance(p.config, ControllerProcessConfig)
        )
        state["groupEndpoints"] = {
            g: e
            for p in plans
            if isinstance(p.config, ProxyConfig)
            for g, e in p.config.groups.items()
        }
        state["startedAt"] = time.time()
        self._save(state)
        return state

    def _start(self, plan: ProcessPlan) -> dict[str, Any]:
        plan.config_path.parent.mkdir(parents=True, exist_ok=True)
        plan.config.save(plan.config_path)
        plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        with plan.log_path.open("ab") as log_file:
            proc = subprocess.Popen(
                plan.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.directory,
            )
        self._children[plan.name] = proc
        record: dict[str, Any] = {
            "name": plan.name,
            "role": plan.role,
            "pid": proc.pid,
            "host": plan.host,
            "addresses": {k: f"{plan.host}:{v}" for k, v in plan.ports.items()},
            "configPath": str(plan.config_path),
            "logPath": str(plan.log_path),
            "argv": plan.argv(),
        }
        if isinstance(plan.config, BrokerProcessConfig):
            record["group"] = plan.config.group  # not to be guessed from the name
        return record

    def _wait_ready(
        self, plans: list[ProcessPlan], records: list[dict[str, Any]], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        pending = {r["name"]: r for r in records}
        scheme, http = admin_http(self.state())
        with http:
            while pending:
                for name, record in list(pending.items()):
                    if self._exited(name, record):
                        raise LocalRuntimeError(
                            f"{name} exited during start; last log lines:\n"
                            f"{_log_tail(Path(record['logPath']))}"
                        )
                    try:
                        answer = http.get(f"{scheme}://{record['addresses']['admin']}/readyz")
                        if answer.status_code == 200:
                            del pending[name]
                    except httpx.HTTPError:
                        pass
                if not pending:
                    return
                if time.monotonic() > deadline:
                    raise LocalRuntimeError(f"not ready after {timeout:.0f}s: {', '.join(pending)}")
                time.sleep(0.1)

    def _exited(self, name: str, record: dict[str, Any]) -> bool:
        """Whether a process waited for has gone: our own child's exit status when we
        started it (and it is still the recorded pid), else /proc."""
        child = self._children.get(name)
        if child is not None and child.pid == record["pid"]:
            return child.poll() is not None
        return not _owned(record["pid"], record["configPath"])

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_path)

    # -- down ----------------------------------------------------------------

    def down(self, timeout: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop every recorded process (SIGTERM, then SIGKILL after ``timeout``)."""
        state = self.state()
        if state is None:
            return []
        stopped = []
        live = [p for p in state["processes"] if _owned(p["pid"], p["configPath"])]
        for proc in live:
            _signal(proc, signal.SIGCONT)  # a paused process cannot handle SIGTERM
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in live:
            while _owned(proc["pid"], proc["configPath"]) and time.monotonic() < deadline:
                _reap(proc["pid"])
                time.sleep(0.05)
            if _owned(proc["pid"], proc["configPath"]):
                _signal(proc, signal.SIGKILL)
                _reap(proc["pid"])
            stopped.append(proc["name"])
        self.state_path.unlink(missing_ok=True)
        end_lease({p["host"] for p in state["processes"]}, self.state_path.resolve())
        return stopped

    # -- acting on one process -----------------------------------------------

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until every recorded process answers /readyz."""
        state = self.state() or {"processes": []}
        self._wait_ready([], state["processes"], timeout)

    def process(self, name: str) -> dict[str, Any]:
        state = self.state() or {"processes": []}
        for proc in state["processes"]:
            if proc["name"] == name:
                return dict(proc)
        names = ", ".join(p["name"] for p in state["processes"]) or "none"
        raise LocalRuntimeError(f"no process named {name!r} (running: {names})")

    def exited(self, name: str) -> bool:
        """Whether ``name``'s recorded process is gone. For a process this runtime
        started, its exit status: /proc would call one that is still between fork
        and exec (its command line not yet its own) dead."""
        return self._exited(name, self.process(name))

    def kill(self, name: str) -> None:
        proc = self.process(name)
        _signal(proc, signal.SIGKILL)
        _reap(proc["pid"])

    def front_pids(self, name: str) -> list[int]:
        """The front processes of broker ``name`` (broker/front): its children."""
        return children_of(self.process(name)["pid"], FRONT_MARKER)

    def kill_front(self, name: str) -> int:
        """SIGKILL one front of broker ``name`` (its broker starts it again); its pid."""
        pids = self.front_pids(name)
        if not pids:
            raise LocalRuntimeError(f"{name} runs no front process (frontProcesses: 0?)")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def pause(self, name: str) -> None:
        _signal(self.process(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        _signal(self.process(name), signal.SIGCONT)

    def restart(
        self, name: str, timeout: float = READY_TIMEOUT_S, *, wait: bool = True
    ) -> dict[str, Any]:
        """Stop ``name`` if it runs, start it again on the same data and address (and,
        with ``wait``, until it is ready: a controller is ready once it knows a leader,
        which needs a quorum of members running)."""
        state = self.state()
        if state is None:
            raise LocalRuntimeError(f"no cluster recorded in {self.directory}")
        record = self.process(name)
        if _owned(record["pid"], record["configPath"]):
            _signal(record, signal.SIGCONT)
            _signal(record, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _owned(record["pid"], record["configPath"]) and time.monotonic() < deadline:
                _reap(record["pid"])
                time.sleep(0.05)
            if _owned(record["pid"], record["configPath"]):
                _signal(record, signal.SIGKILL)
                _reap(record["pid"])
        with Path(record["logPath"]).open("ab") as log_file:
            proc = subprocess.Popen(
                record["argv"],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.directory,
            )
        self._children[name] = proc
        record["pid"] = proc.pid
        state["processes"] = [record if p["name"] == name else p for p in state["processes"]]
        self._save(state)
        if not wait:
            return record
        deadline = time.monotonic() + timeout
        scheme, http = admin_http(state)
        with http:
            while time.monotonic() < deadline:
                # Its exit status, not /proc (see _children): a restart was seen to
                # call its live, starting process dead.
                if self._exited(name, record):
                    raise LocalRuntimeError(
                        f"{name} exited during restart:\n{_log_tail(Path(record['logPath']))}"
                    )
                try:
                    ready = http.get(f"{scheme}://{record['addresses']['admin']}/readyz")
                    if ready.status_code == 200:
                        return record
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise LocalRuntimeError(f"{name} not ready {timeout:.0f}s after restart")


def client_tls(state: dict[str, Any] | None) -> ClientTls | None:
    """rocketctl's TLS for the cluster recorded in ``state`` (None: plaintext)."""
    recorded = (state or {}).get("tls")
    return ClientTls(TlsFiles.model_validate(recorded)) if recorded else None


def admin_http(state: dict[str, Any] | None, timeout: float = 2.0) -> tuple[str, httpx.Client]:
    """The admin scheme of the recorded cluster and an HTTP client that trusts its CA."""
    tls = client_tls(state)
    return admin_scheme(tls), httpx.Client(timeout=timeout, verify=http_verify(tls))


def own_tier_directories(plans: list[ProcessPlan], directory: Path) -> set[Path]:
    """The posix tier directories inside the cluster's directory (a relative
    ``posix.path``), made like ``data/``; one elsewhere must be there already, as a
    mounted share is (making it would hide a missing mount)."""
    out = set()
    for plan in plans:
        if not isinstance(plan.config, BrokerProcessConfig):
            continue
        tiered = plan.config.tiered_storage
        if tiered.enabled and tiered.backend is TieredBackend.POSIX and tiered.posix:
            path = Path(tiered.posix.path)
            if path.is_relative_to(directory):
                out.add(path)
    return out


def _signal(proc: dict[str, Any], sig: int) -> None:
    if _owned(proc["pid"], proc["configPath"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc["pid"], sig)


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child (tests, restarts)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _start_block(directory: Path) -> int:
    """Spread runs of different directories over 127.0.x.*, so parallel runs rarely
    probe the same addresses."""
    import zlib

    return 1 + zlib.crc32(str(directory).encode()) % 200
