"""What test suites use: :class:`KubeHarness` starts the emulator and the realiser as
child processes in one directory and gives the test a cluster — a kubeconfig, the
real ``kubectl``, small sync helpers over the API, the realiser's DNS map, events
and kill switch — and stops exactly what it started, by PID, checking that no
process of a realised pod survived.

Usable as a context manager or from a session-scoped pytest fixture::

    with KubeHarness(tmp_path) as kube:
        kube.kubectl("apply", "-f", "cluster.yaml")
        kube.wait_for(lambda: kube.get("pods", "default", "web-0"), what="web-0")

Layout of the directory: ``kubeconfig``, ``emulator.log``, ``realiser.log``,
``kubectl-cache/`` and the realiser's own files (``events.jsonl``, ``hosts.json``,
``logs/``, ``volumes/``, ``pods/``, ``processes.jsonl``, ``realiser.json``).
"""

from __future__ import annotations

import builtins
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from rocketcluster.ctl.testing import wait_for as _wait_for
from rocketcluster.e2e.kube.binaries import ensure_binaries
from rocketcluster.e2e.kube.events import read_events
from rocketcluster.e2e.kube.imagerun import remove_recorded
from rocketcluster.e2e.kube.kubeconfig import write_kubeconfig
from rocketcluster.e2e.kube.processes import Ledger, ProcessRecord, dying_with_parent, record
from rocketcluster.e2e.kube.processes import stop_groups as _stop_groups

T = TypeVar("T")
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 20.0


class HarnessError(RuntimeError):
    """The harness could not start, or found processes left behind."""


class KubeHarness:
    def __init__(
        self,
        directory: Path,
        *,
        realise: bool = True,
        probe_period_cap: float | None = None,
        start_timeout: float = START_TIMEOUT_S,
        pod_runtime: str = "process",
        host_sources: Mapping[str, Path] | None = None,
    ) -> None:
        self.dir = directory.resolve()  # pods run elsewhere: every path they see is absolute
        # image -> a release's tree its host processes run (the realiser's --host-source)
        self.host_sources = dict(host_sources or {})
        self.realise = realise
        self.probe_period_cap = probe_period_cap
        self.pod_runtime = pod_runtime  # "image": pods run from their images (buildah)
        self.start_timeout = start_timeout
        self.kubeconfig = directory / "kubeconfig"
        self.api_url = ""
        self.control_url = ""
        self._emulator: subprocess.Popen[bytes] | None = None
        # everything started, in order, with its identity taken at start
        self._started: list[tuple[subprocess.Popen[bytes], ProcessRecord]] = []
        self._http: httpx.Client | None = None
        self._kinds: dict[str, tuple[str, bool]] = {}

    # --- life cycle ----------------------------------------------------------------

    def __enter__(self) -> KubeHarness:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(
        self,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        stdout_pipe: bool = False,
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                dying_with_parent(argv, env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout_pipe else out,
                stderr=out,
                env=env,
                start_new_session=True,
            )
        self._started.append((proc, record(proc.pid, log.stem)))
        return proc

    def start(self) -> KubeHarness:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_emulator()
            if self.realise:
                self._start_realiser()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_emulator(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "rocketcluster.e2e.kube.emulator",
            "--port",
            "0",
            "--pod-logs",
            str(self.dir / "logs"),
        ]
        proc = self._emulator = self._spawn(argv, self.dir / "emulator.log", stdout_pipe=True)
        deadline = time.monotonic() + self.start_timeout
        line = b""
        stdout = proc.stdout
        if stdout is None:
            raise HarnessError("the emulator has no stdout pipe")
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([stdout], [], [], max(0.0, left))
            if not ready:
                raise HarnessError(
                    f"the emulator did not say READY in {self.start_timeout:.0f}s;"
                    f" see {self.dir / 'emulator.log'}"
                )
            chunk = os.read(stdout.fileno(), 1)
            if not chunk:
                raise HarnessError(f"the emulator exited; see {self.dir / 'emulator.log'}")
            line += chunk
        word, _, url = line.decode().strip().partition(" ")
        if word != "READY":
            raise HarnessError(f"unexpected emulator output {line!r}")
        self.api_url = url
        write_kubeconfig(self.kubeconfig, url)
        self._http = httpx.Client(base_url=url, timeout=30.0)

    def _start_realiser(self) -> None:
        state = self.dir / "realiser.json"
        state.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "rocketcluster.e2e.kube.realiser",
            "--api",
            self.api_url,
            "--dir",
            str(self.dir),
        ]
        if self.probe_period_cap:
            argv += ["--probe-period-cap", str(self.probe_period_cap)]
        argv += ["--pod-runtime", self.pod_runtime]
        for image, source in self.host_sources.items():
            argv += ["--host-source", f"{image}={source}"]
        proc = self._spawn(argv, self.dir / "realiser.log")

        def started() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise HarnessError(f"the realiser exited; see {self.dir / 'realiser.log'}")
            if not state.exists():
                return None
            data: dict[str, Any] = json.loads(state.read_text())
            return data if data.get("pid") == proc.pid else None

        info = self.wait_for(started, self.start_timeout, "the realiser to start")
        self.control_url = str(info["control"])

    def start_process(
        self, argv: list[str], *, env: dict[str, str] | None = None, name: str = "process"
    ) -> subprocess.Popen[bytes]:
        """Start an extra process (the operator, a client) that :meth:`stop` stops;
        its output goes to ``DIR/<name>.log``. ``env`` adds to :meth:`environment`."""
        full_env = {**os.environ, **self.environment(), **(env or {})}
        return self._spawn(argv, self.dir / f"{name}.log", env=full_env)

    def stop(self) -> None:
        """Stop what was started — extra processes, the realiser, the emulator — by
        PID, then make sure no realised pod's process is left."""
        if self._http is not None:
            self._http.close()
            self._http = None
        for proc, rec in reversed(self._started):  # extra processes, realiser, emulator
            _stop_one(proc, rec)
        self._started.clear()
        self._emulator = None
        ledger = Ledger(self.dir / "processes.jsonl")
        survivors = _stop_groups(list(ledger.records()), grace=1.0)
        remove_recorded(self.dir)  # working containers of a realiser that was killed
        if survivors:
            raise HarnessError(f"processes survived their pods: {survivors}")

    # --- kubectl and the API -------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """What a process on the host needs to reach the emulator."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """The real kubectl against the emulator. Its default ``--validate=strict``
        works (the emulator validates server-side and refuses unknown fields of
        custom resources); ``--validate=false`` makes the server prune them instead."""
        binary = ensure_binaries().kubectl
        argv = [
            str(binary),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.dir / "kubectl-cache"),
            *args,
        ]
        done = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise HarnessError(
                f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}{done.stdout}"
            )
        return done

    @property
    def emulator_pid(self) -> int:
        if self._emulator is None:
            raise HarnessError("the harness is not started")
        return self._emulator.pid

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            raise HarnessError("the harness is not started")
        return self._http

    def _discover(self) -> None:
        kinds: dict[str, tuple[str, bool]] = {}
        groups = [("", "v1")]
        for group in self.http.get("/apis").json().get("groups", []):
            groups.append((group["name"], group["preferredVersion"]["version"]))
        for group, version in groups:
            prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
            for res in self.http.get(prefix).json().get("resources", []):
                if "/" in res["name"]:
                    continue
                entry = (f"{prefix}/{res['name']}", bool(res["namespaced"]))
                names = [
                    res["name"],
                    res["kind"],
                    res["kind"].lower(),
                    res["singularName"],
                    *(res.get("shortNames") or []),
                ]
                if group:
                    names += [f"{res['name']}.{group}", f"{group}/{version}/{res['name']}"]
                else:
                    names.append(f"v1/{res['name']}")
                for name in names:
                    kinds.setdefault(name, entry)
        self._kinds = kinds

    def path(self, kind: str, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of a kind (plural, Kind, short name, ``plural.group``) or of
        one object of it."""
        if kind.startswith("/"):
            base, namespaced = kind, namespace is not None
        else:
            if kind not in self._kinds:
                self._discover()
            if kind not in self._kinds:
                raise HarnessError(f"the API server does not serve {kind!r}")
            base, namespaced = self._kinds[kind]
        if namespaced and namespace is not None and not kind.startswith("/"):
            prefix, plural = base.rsplit("/", 1)
            base = f"{prefix}/namespaces/{namespace}/{plural}"
        return base + (f"/{name}" if name else "")

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        response = self.http.get(self.path(kind, namespace, name))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def list(
        self, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else {}
        response = self.http.get(self.path(kind, namespace), params=params)
        response.raise_for_status()
        return list(response.json().get("items") or [])

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        response = self.http.post(self.path(obj["kind"], meta.get("namespace")), json=obj)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        subresource: str | None = None,
        content_type: str = "application/merge-patch+json",
    ) -> dict[str, Any]:
        url = self.path(kind, namespace, name) + (f"/{subresource}" if subresource else "")
        response = self.http.patch(
            url, content=json.dumps(patch), headers={"Content-Type": content_type}
        )
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def delete(
        self, kind: str, namespace: str | None, name: str, *, propagation: str | None = None
    ) -> dict[str, Any] | None:
        body = {"propagationPolicy": propagation} if propagation else {}
        response = self.http.request("DELETE", self.path(kind, namespace, name), json=body)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    # --- the realiser --------------------------------------------------------------

    def hosts(self) -> dict[str, str]:
        path = self.dir / "hosts.json"
        data: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        return data

    def resolve(self, host: str) -> str:
        """The address of a cluster DNS name, as the realiser maps it."""
        address = self.hosts().get(host.rstrip("."))
        if address is None:
            raise HarnessError(f"{host} is not a known cluster name")
        return address

    def events(self) -> builtins.list[dict[str, Any]]:
        return read_events(self.dir / "events.jsonl")

    def realised_pods(self) -> builtins.list[dict[str, Any]]:
        pods: builtins.list[dict[str, Any]] = httpx.get(f"{self.control_url}/v1/pods").json()[
            "pods"
        ]
        return pods

    def kill_pod(self, namespace: str, name: str) -> builtins.list[int]:
        """SIGKILL a pod's containers (a process or node failure)."""
        response = httpx.post(f"{self.control_url}/v1/pods/{namespace}/{name}/kill")
        response.raise_for_status()
        killed: builtins.list[int] = response.json()["killed"]
        return killed

    def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 60.0, what: str = ""
    ) -> T:
        return _wait_for(predicate, timeout=timeout, interval=0.1, what=what)

    def realised_processes(self) -> builtins.list[ProcessRecord]:
        return builtins.list(Ledger(self.dir / "processes.jsonl").records())


def _stop_one(proc: subprocess.Popen[bytes], rec: ProcessRecord) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
    _stop_groups([rec], grace=1.0)
