"""The operator's Deployment on the emulated backend: ``replicas`` operator processes
on this machine, each a candidate for the Lease (operator/leader.py), each started
again when it exits — what kubelet does for a container under ``restartPolicy:
Always`` — so a test can kill the leader, or let a failpoint end it
(operator/failpoints.py), and watch the standby take over and the dead one come back
as a candidate.

Every process is started through the harness, which stops them all by PID.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from rocketcluster.e2e.kube.harness import KubeHarness

LEASE_NAME = "rocketcluster-operator"
RESTART_DELAY_S = 1.0  # kubelet's first back-off is 10 s; tests need no more than this
# Lease timings for tests (the chart's defaults: 15 / 10 / 2 s).
LEASE_ENV = {
    "ROCKETCLUSTER_LEASE_DURATION_SECONDS": "8",
    "ROCKETCLUSTER_LEASE_RENEW_DEADLINE_SECONDS": "6",
    "ROCKETCLUSTER_LEASE_RETRY_PERIOD_SECONDS": "1",
}


def replica_name(index: int) -> str:
    return f"rocketcluster-operator-{index}"


@dataclass(frozen=True)
class Exit:
    """One replica's process ended (a kill, a failpoint, a lost Lease)."""

    at: float  # time.time()
    replica: int
    status: int | None


class OperatorReplicas:
    def __init__(
        self,
        harness: KubeHarness,
        argv: list[str],
        env: dict[str, str],
        replicas: int,
        namespace: str = "default",
    ) -> None:
        self._harness = harness
        self._argv = argv
        self._env = env
        self.namespace = namespace  # the Lease's: the operator's own namespace
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._starts = [0] * replicas
        self._held = False  # True while a test stops replicas on purpose
        self._stopping = threading.Event()
        self.exits: list[Exit] = []
        for index in range(replicas):
            self._processes.append(self._start(index))
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        self._starts[index] += 1
        name = self.pod_name(index)
        env = {**self._env, **LEASE_ENV, "POD_NAME": name}
        return self._harness.start_process(self._argv, env=env, name=name)

    def pod_name(self, index: int) -> str:
        """The name replica ``index``'s current process goes by — its log's, and the
        start of its Lease identity: a new one per start, as a new pod's, so an
        identity left in the Lease by a process that ended is never taken for its
        successor's."""
        start = self._starts[index]
        return replica_name(index) + ("" if start == 1 else f"-{start}")

    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                if self._held:
                    continue
                for index, proc in enumerate(self._processes):
                    if proc.poll() is None:
                        continue
                    self.exits.append(Exit(time.time(), index, proc.returncode))
                    time.sleep(RESTART_DELAY_S)
                    self._processes[index] = self._start(index)

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        with self._lock:
            return list(self._processes)

    def holder(self) -> str:
        """The Lease's holderIdentity ("" when released or not yet created)."""
        lease = self._harness.get("leases", self.namespace, LEASE_NAME) or {}
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def leader(self, timeout: float = 60.0) -> int:
        """The index of the replica whose current process holds the Lease, waiting for
        one to hold it."""
        deadline = time.monotonic() + timeout
        while True:
            holder = self.holder()
            with self._lock:
                names = [self.pod_name(i) for i in range(len(self._starts))]
            for index, name in enumerate(names):
                if holder.startswith(name + "_"):
                    return index
            if holder and len(names) == 1:
                return 0  # one replica (image mode: its name is baked into its argv)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no operator replica holds the Lease (holder {holder!r})")
            time.sleep(0.2)

    def leading_process(self) -> subprocess.Popen[bytes]:
        return self.processes[self.leader()]

    def kill_leader(self) -> tuple[str, float]:
        """SIGKILL the leading replica (no release: the standby must wait the Lease
        out); the identity that held the Lease and when it was killed."""
        index = self.leader()
        holder = self.holder()
        proc = self.processes[index]
        proc.send_signal(signal.SIGKILL)
        return holder, time.time()

    def wait_for_new_holder(self, old: str, timeout: float = 60.0) -> float:
        """When (time.time()) the Lease named another holder than ``old``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            holder = self.holder()
            if holder and holder != old:
                return time.time()
            time.sleep(0.2)
        raise TimeoutError(f"the Lease still names {old!r} after {timeout:.0f}s")

    def restart_all(self) -> None:
        """SIGTERM every replica (the leader gives the Lease back) and start each
        again, as a rollout of the Deployment would."""
        with self._lock:
            self._held = True
        try:
            for index, proc in enumerate(self.processes):
                proc.terminate()
                proc.wait(timeout=60)
                with self._lock:
                    self._processes[index] = self._start(index)
        finally:
            with self._lock:
                self._held = False

    def stop(self) -> None:
        """Stop restarting; the harness stops the processes themselves."""
        self._stopping.set()
        self._supervisor.join(timeout=10)


__all__ = ["LEASE_ENV", "LEASE_NAME", "Exit", "OperatorReplicas", "replica_name"]
