"""A Prometheus server of our own: the Debian package's binary, never its system
service, on a free loopback port with its own storage directory, stopped by PID.

The process runs in its own session and dies with the thread that started it
(``PR_SET_PDEATHSIG``), so even a killed test run leaves no Prometheus behind.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rocketcluster.e2e.kube.processes import dying_with_parent
from rocketcluster.e2e.prometheus.api import PrometheusAPI, PrometheusAPIError

INSTALL_HINT = "sudo apt-get install -y prometheus  (Debian/Ubuntu; `make test` installs it)"
STOP_TIMEOUT_S = 20.0


class PrometheusUnavailable(RuntimeError):
    """No prometheus/promtool binary on this machine."""


def find_binary(name: str = "prometheus") -> Path:
    """``name`` from PATH (or /usr/bin, where the Debian package puts it)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/bin")
    if found is None:
        raise PrometheusUnavailable(f"{name} is not installed; install it with: {INSTALL_HINT}")
    return Path(found)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class PrometheusServer:
    """``config_text`` served from ``directory`` (config, TSDB and log live there)."""

    directory: Path
    config_text: str
    binary: Path = field(default_factory=find_binary)
    port: int = 0
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "prometheus.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def api(self) -> PrometheusAPI:
        return PrometheusAPI(self.url)

    def start(self, timeout: float = 60.0, attempts: int = 3) -> None:
        """Start and wait for /-/ready. Without a ``port`` set, a free one is chosen,
        and a port taken between choosing and binding it is retried on another."""
        if self._process is not None:
            raise RuntimeError(f"Prometheus already runs as pid {self._process.pid}")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(self.config_text)
        chosen = self.port == 0
        for attempt in range(attempts if chosen else 1):
            if chosen:
                self.port = free_loopback_port()
            self._spawn(config)
            try:
                self._wait_ready(timeout)
                return
            except PrometheusAPIError:
                self.stop()
                taken = "address already in use" in _tail(self.log_path)
                if not (chosen and taken) or attempt == attempts - 1:
                    raise

    def _spawn(self, config: Path) -> None:
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                dying_with_parent(
                    [
                        str(self.binary),
                        f"--config.file={config}",
                        f"--storage.tsdb.path={self.directory / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--storage.tsdb.retention.time=2h",
                        "--log.level=info",
                    ]
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.api() as api:
            while not api.ready():
                assert self._process is not None
                if self._process.poll() is not None:
                    raise PrometheusAPIError(
                        f"prometheus exited with {self._process.returncode} during start; "
                        f"log {self.log_path}:\n{_tail(self.log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise PrometheusAPIError(
                        f"prometheus not ready after {timeout:.0f}s; log:\n{_tail(self.log_path)}"
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM our process (by its PID), SIGKILL after a grace period, reap it."""
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 20) -> str:
        return _tail(self.log_path, lines)


@contextlib.contextmanager
def running_prometheus(directory: Path, config_text: str) -> Iterator[PrometheusServer]:
    server = PrometheusServer(directory, config_text)
    server.start()
    try:
        yield server
    finally:
        server.stop()
