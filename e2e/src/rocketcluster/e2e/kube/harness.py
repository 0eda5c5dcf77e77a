"""What test suites use: :class:`KubeHarness` starts the emulator and the realiser as
child processes in one directory and gives the test a cluster — a kubeconfig, the
real ``kubectl``, small sync helpers over the API, the realiser's DNS map, events
and kill switch — and stops exactly what it started, by PID, checking that no
process of a realised pod survived.

Usable as a context manager or from a session-scoped pytest fixture::

    with KubeHarness(tmp_path) as kube:
        kube.kubectl("apply", "-f", "cluster.yaml")
        kube.wait_for(lambda: kube.get("pods", "default", "web-0"), what="web-0")

Every caller carries a token: the harness writes a random admin token to
``admin-token`` (the emulator reads it with ``--admin-token-file``), and kubectl,
the harness's own client and the realiser use it (``system:masters``); pods get
their ServiceAccount's token from the realiser (TokenRequest), and
:meth:`KubeHarness.service_account_kubeconfig` gives a host process one.
The emulator enforces RBAC (``authorization_mode="AlwaysAllow"``: authentication
only); every 403 it answered is in :meth:`KubeHarness.forbidden_report`.

Layout of the directory: ``kubeconfig``, ``admin-token``, ``emulator.log``, ``realiser.log``,
``kubectl-cache/`` and the realiser's own files (``events.jsonl``, ``hosts.json``,
``logs/``, ``volumes/``, ``pods/``, ``processes.jsonl``, ``realiser.json``).
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
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
from rocketcluster.e2e.kube import firewall
from rocketcluster.e2e.kube.binaries import ensure_binaries
from rocketcluster.e2e.kube.events import read_events
from rocketcluster.e2e.kube.imagerun import remove_recorded
from rocketcluster.e2e.kube.kubeconfig import write_kubeconfig
from rocketcluster.e2e.kube.processes import Ledger, ProcessRecord, dying_with_parent, record
from rocketcluster.e2e.kube.processes import stop_groups as _stop_groups

T = TypeVar("T")
# "RBAC": the emulator authorises every request as an API server does (the default);
# "AlwaysAllow" authenticates only (AUTHORIZATION_MODES in emulator.py).
# ROCKETCLUSTER_E2E_AUTHORIZATION_MODE overrides it for a whole run.
ENV_AUTHORIZATION_MODE = "ROCKETCLUSTER_E2E_AUTHORIZATION_MODE"
DEFAULT_AUTHORIZATION_MODE = "RBAC"
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
        nodes: int = 1,
        authorization_mode: str | None = None,
        network_policies: str = "off",
    ) -> None:
        self.dir = directory.resolve()  # pods run elsewhere: every path they see is absolute
        # image -> a release's tree its host processes run (the realiser's --host-source)
        self.host_sources = dict(host_sources or {})
        self.realise = realise
        self.probe_period_cap = probe_period_cap
        self.pod_runtime = pod_runtime  # "image": pods run from their images (buildah)
        self.nodes = nodes  # the realiser's --nodes: "realiser", or realiser-0 … realiser-(N-1)
        self.network_policies = network_policies  # the realiser's --network-policies
        self.start_timeout = start_timeout
        self.kubeconfig = directory / "kubeconfig"
        self.authorization_mode = authorization_mode or os.environ.get(
            ENV_AUTHORIZATION_MODE, DEFAULT_AUTHORIZATION_MODE
        )
        self.token_file = self.dir / "admin-token"
        self.token = ""  # the admin's bearer token (system:masters), made at start
        self.api_url = ""  # plain HTTP: the realiser, pods and the harness's client
        self.secure_url = ""  # HTTPS, in the kubeconfigs (kubectl sends tokens only over TLS)
        self.ca = b""  # the PEM of the CA of the emulator's serving certificate
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
        self.token = secrets.token_urlsafe(32)
        self.token_file.unlink(missing_ok=True)
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.token + "\n")
        argv = [
            sys.executable,
            "-m",
            "rocketcluster.e2e.kube.emulator",
            "--port",
            "0",
            "--pod-logs",
            str(self.dir / "logs"),
            "--admin-token-file",
            str(self.token_file),
            "--authorization-mode",
            self.authorization_mode,
            "--tls-dir",
            str(self.dir / "tls"),
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
        word, *urls = line.decode().split()
        if word != "READY" or len(urls) != 2:
            raise HarnessError(f"unexpected emulator output {line!r}")
        url, self.secure_url = urls
        self.api_url = url
        self.ca = (self.dir / "tls" / "ca.crt").read_bytes()
        write_kubeconfig(self.kubeconfig, self.secure_url, token=self.token, ca=self.ca)
        self._http = httpx.Client(
            base_url=url, timeout=30.0, headers={"Authorization": f"Bearer {self.token}"}
        )

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
            "--token-file",
            str(self.token_file),
        ]
        if self.probe_period_cap:
            argv += ["--probe-period-cap", str(self.probe_period_cap)]
        argv += ["--pod-runtime", self.pod_runtime]
        if self.nodes != 1:
            argv += ["--nodes", str(self.nodes)]
        if self.network_policies != "off":
            argv += ["--network-policies", self.network_policies]
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

    # --- identities and refusals ---------------------------------------------------

    def service_account_token(self, namespace: str, name: str) -> str:
        """A new token of the ServiceAccount (TokenRequest, as the admin)."""
        response = self.http.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        if response.status_code == 404:
            raise HarnessError(f"no ServiceAccount {namespace}/{name}")
        response.raise_for_status()
        return str(response.json()["status"]["token"])

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | None = None
    ) -> Path:
        """A kubeconfig (default ``DIR/kubeconfig-<ns>-<name>``) that acts as the
        ServiceAccount, with a token minted for it; its default namespace is ``namespace``."""
        path = path or self.dir / f"kubeconfig-{namespace}-{name}"
        token = self.service_account_token(namespace, name)
        return write_kubeconfig(path, self.secure_url, namespace, token=token, ca=self.ca)

    def forbidden_report(self) -> builtins.list[dict[str, Any]]:
        """Every request the emulator refused with 403 so far, oldest first: ``user``,
        ``groups``, ``verb``, ``apiGroup``, ``resource``, ``subresource``,
        ``namespace``, ``name``, ``path`` and the ``message`` the caller got."""
        log = self.dir / "emulator.log"
        out: builtins.list[dict[str, Any]] = []
        if not log.exists():
            return out
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith('{"forbidden"'):
                continue
            try:
                out.append(json.loads(line)["forbidden"])
            except (ValueError, KeyError):
                continue  # a line being written
        return out

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

    def network_policy_refusals(self) -> dict[str, int]:
        """Connections the realiser's NetworkPolicies refused so far, per isolated pod
        ("namespace/name"); {} unless it enforces them (``network_policies``)."""
        state = json.loads((self.dir / "realiser.json").read_text())
        return firewall.refusals_of(state)


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
