"""``kubectl drain`` of a realised node, as tests run it, and what they judge it by.

:func:`drain` runs the real kubectl (``--ignore-daemonsets --delete-emptydir-data``)
and keeps what it printed: the evictions a PodDisruptionBudget refused (kubectl
retries them every 5 s) and those that went through. :class:`Disruptions` watches a
set of pods while it runs, from a thread: the most of them down at once (missing,
unready or terminating), which a budget of one at a time keeps at one.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from rocketcluster.e2e.kube.disruption import is_healthy
from rocketcluster.e2e.kube.harness import KubeHarness

REFUSED = "would violate the pod's disruption budget"
_EVICTED = re.compile(r"^pod/(\S+) evicted$", re.MULTILINE)
_REFUSED_POD = re.compile(r'error when evicting pods/"([^"]+)"')


@dataclass(frozen=True)
class DrainRun:
    node: str
    returncode: int
    output: str  # stdout, then stderr
    seconds: float

    @property
    def refused(self) -> int:
        """Evictions answered 429 (each retried by kubectl)."""
        return self.output.count(REFUSED)

    def refused_pods(self) -> list[str]:
        return _REFUSED_POD.findall(self.output)

    def evicted(self) -> list[str]:
        """Pods evicted, in kubectl's order."""
        return _EVICTED.findall(self.output)

    @property
    def drained(self) -> bool:
        return self.returncode == 0 and f"node/{self.node} drained" in self.output


def drain(
    kube: KubeHarness, node: str, *, timeout_s: float = 300.0, extra: tuple[str, ...] = ()
) -> DrainRun:
    """``kubectl drain node`` (cordon, evict, wait for the pods to go): its result
    whatever it was (a failure is the caller's to judge)."""
    started = time.monotonic()
    done = kube.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={int(timeout_s)}s",
        *extra,
        check=False,
        timeout=timeout_s + 60.0,
    )
    return DrainRun(node, done.returncode, done.stdout + done.stderr, time.monotonic() - started)


@dataclass
class Disruptions:
    """How many of ``replicas`` pods (``selector`` in ``namespace``) were down at
    each look, taken every ``interval`` seconds while in the ``with`` block."""

    kube: KubeHarness
    namespace: str
    selector: str
    replicas: int
    interval: float = 0.1
    worst: int = 0
    looks: int = 0
    # (seconds since the start, pods down, names of the pods up) at each change
    timeline: list[tuple[float, int, tuple[str, ...]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def look(self) -> tuple[int, tuple[str, ...]]:
        """(pods down, names of the pods up) now."""
        pods = self.kube.list("pods", self.namespace, label_selector=self.selector)
        up = tuple(sorted(p["metadata"]["name"] for p in pods if is_healthy(p)))
        return self.replicas - len(up), up

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                down, up = self.look()
            except Exception:  # a failed look is no observation
                time.sleep(self.interval)
                continue
            self.looks += 1
            self.worst = max(self.worst, down)
            if not self.timeline or self.timeline[-1][1:] != (down, up):
                self.timeline.append((time.monotonic() - started, down, up))
            time.sleep(self.interval)

    def __enter__(self) -> Disruptions:
        self._thread = threading.Thread(target=self._run, name="disruptions", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
