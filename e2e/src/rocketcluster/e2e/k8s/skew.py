"""Version skew during a roll from the previous release (issue #30, item 6): what
every controller member says, sampled twice a second in a background thread, while
RocketTopic objects are applied as a user would for as long as members of both
releases run — so catalogue writes meet members of both releases.

A member's catalogue is a pure function of the Raft log it applied: two answers at
the same applied index must be the same catalogue, whichever member gave them and
whenever. A member of the previous release that fails a command its peers applied
(one it does not know) breaks that, and so does anything that diverges. An answer
counts only when the member's applied index was the same before and after its
catalogue was read.

Pure parts (``disagreements``, ``previous_release_ran_until``, ``early_batches``)
take what was recorded; the sampler's thread and the applier's do the I/O."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.features import Feature, reported
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition
from rocketcluster.e2e.k8s.rollcheck import PodEvent


@dataclass(frozen=True)
class MemberSample:
    at: float  # epoch seconds
    member: str  # the member's Deployment name
    pod: str
    features: frozenset[str]  # what it reports (none: the previous release)
    leads: bool
    applied: int | None  # None: the index moved while its catalogue was read
    catalogue: str | None  # canonical JSON of its /v1/catalogue


def _canonical(catalogue: dict[str, Any]) -> str:
    return json.dumps(catalogue, sort_keys=True, separators=(",", ":"))


def disagreements(samples: list[MemberSample]) -> list[str]:
    """Answers at one applied index that differ (a member that diverged)."""
    by_index: dict[int, dict[str, MemberSample]] = {}
    for s in samples:
        if s.applied is None or s.catalogue is None:
            continue
        by_index.setdefault(s.applied, {}).setdefault(s.catalogue, s)
    return [
        f"applied index {index}: "
        + "; ".join(f"{s.member} ({s.pod}) at {s.at:.1f}: {text[:300]}" for text, s in seen.items())
        for index, seen in sorted(by_index.items())
        if len(seen) > 1
    ]


def last_without(samples: list[MemberSample], feature: str) -> float | None:
    """When a member was last seen answering without ``feature`` (None: never)."""
    times = [s.at for s in samples if feature not in s.features]
    return max(times) if times else None


def previous_release_ran_until(
    samples: list[MemberSample], pod_events: list[PodEvent], feature: str
) -> float | None:
    """The last moment a member without ``feature`` is known to have run: the later
    of its last answer and the deletion of its pod (it runs until it stops after
    that)."""
    old_pods = {s.pod for s in samples if feature not in s.features}
    deleted = [e.at for e in pod_events if e.kind == "deleting" and e.pod in old_pods]
    times = [t for t in (last_without(samples, feature), max(deleted, default=None)) if t]
    return max(times) if times else None


def early_batches(events: list[dict[str, Any]], last_old: float | None) -> list[str]:
    """PutCatalogueEntries commands the controllers applied before ``last_old``, the
    last moment a member of the previous release ran (which fails them)."""
    if last_old is None:
        return []
    return [
        f"index {e.get('index')} at {e['time'] / 1000:.1f} ({e.get('detail')}); a member "
        f"of the previous release ran until {last_old:.1f}"
        for e in events
        if e.get("command") == "PutCatalogueEntries" and e["time"] / 1000 < last_old
    ]


@dataclass
class SkewSampler:
    """Every controller member's ``/v1/cluster`` and ``/v1/catalogue`` each
    ``period_s``; ``on_round(answers)`` runs after each round (in the thread)."""

    cluster: OperatedCluster
    period_s: float = 0.5
    on_round: Callable[[list[MemberSample]], None] | None = None
    samples: list[MemberSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # on_round's
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> SkewSampler:
        self._thread = threading.Thread(target=self._run, daemon=True, name="skew-sampler")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _members(self) -> list[tuple[str, str, str]]:
        """(member, pod, ip) of every live controller pod."""
        found = []
        for pod in self.cluster.controller_pods():
            member = (pod["metadata"].get("labels") or {}).get(kube.LABEL_MEMBER, "")
            ip = (pod.get("status") or {}).get("podIP")
            if member and ip and not pod["metadata"].get("deletionTimestamp"):
                found.append((member, pod["metadata"]["name"], ip))
        return found

    def _sample(self, http: httpx.Client, member: str, pod: str, ip: str) -> MemberSample | None:
        base = f"http://{ip}:{ADMIN_PORT}"
        try:
            before = http.get(f"{base}/v1/cluster").json()
            catalogue = http.get(f"{base}/v1/catalogue").json()
            after = http.get(f"{base}/v1/cluster").json()
        except (httpx.HTTPError, ValueError):
            return None  # starting, stopping: no answer
        applied = (before.get("raft") or {}).get("applied")
        same = applied is not None and applied == (after.get("raft") or {}).get("applied")
        return MemberSample(
            at=time.time(),
            member=member,
            pod=pod,
            features=reported(after),
            leads=after.get("leader") is not None and after.get("leader") == after.get("self"),
            applied=int(applied) if same and applied is not None else None,
            catalogue=_canonical(catalogue) if same else None,
        )

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as http:
            while not self._stop.is_set():
                try:
                    members = self._members()
                except Exception:  # the API briefly unreachable is no failure
                    members = []
                answered = [s for m in members if (s := self._sample(http, *m)) is not None]
                self.samples += answered
                if self.on_round is not None:
                    try:
                        self.on_round(answered)
                    except Exception as exc:  # recorded: the test says it
                        self.errors.append(f"on_round: {exc!r}")
                self._stop.wait(self.period_s)


def topic_object(name: str, cluster: str, trace: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"cluster": cluster, "queues": 2}
    if trace is not None:
        spec["trace"] = trace
    return {
        "apiVersion": kube.API_VERSION,
        "kind": "RocketTopic",
        "metadata": {"name": name, "labels": {"skew": "roll"}},
        "spec": spec,
    }


@dataclass
class TopicsDuringRoll:
    """RocketTopic objects created one at a time (as a user would) from the
    first sampler round in which members of both releases answer until three rounds
    in a row see none of the previous release: one a second, or every half second
    while a leader on new code has a member of the previous release beside it (the
    window in which a batch would reach a leader that applies it and a follower that
    does not). The first one traces all."""

    cluster: OperatedCluster
    # How an object is created (None: ``kubectl apply``; under a loaded emulator a
    # POST to the API server takes a fraction of kubectl's time).
    create: Callable[[dict[str, Any]], object] | None = None
    prefix: str = "skew"
    limit: int = 60
    trace: str = "all"
    every_s: float = 1.0
    window_every_s: float = 0.5
    started_at: float | None = None
    applied: dict[str, float] = field(default_factory=dict)  # name -> when
    errors: list[str] = field(default_factory=list)
    # The Ready condition's reasons of the traced topic, in the order first seen.
    reasons: list[str] = field(default_factory=list)
    _window: threading.Event = field(default_factory=threading.Event)
    _over: threading.Event = field(default_factory=threading.Event)
    _rounds_without_old: int = 0
    _thread: threading.Thread | None = None

    @property
    def names(self) -> list[str]:
        return list(self.applied)

    @property
    def traced(self) -> str:
        return f"{self.prefix}-000"

    def on_round(self, answered: list[MemberSample]) -> None:
        new = [s for s in answered if Feature.FEATURES in s.features]
        old = [s for s in answered if Feature.FEATURES not in s.features]
        if new and old:
            if any(s.leads for s in new):
                self._window.set()
            else:
                self._window.clear()
            if self._thread is None:
                self.started_at = time.time()
                self._thread = threading.Thread(target=self._apply, daemon=True, name="skew-topics")
                self._thread.start()
        if self._thread is None:
            return
        self._rounds_without_old = 0 if old or not answered else self._rounds_without_old + 1
        if self._rounds_without_old >= 3:
            self._over.set()
        if self.traced in self.applied:
            self._note_reason()

    def _note_reason(self) -> None:
        try:
            found = self.cluster.backend.get("rockettopic", self.traced) or {}
        except Exception:  # the API briefly unreachable: the next round looks again
            return
        ready = condition(found.get("status") or {}, "Ready")
        if ready is not None and (not self.reasons or self.reasons[-1] != ready["reason"]):
            self.reasons.append(str(ready["reason"]))

    def _apply(self) -> None:
        ns = self.cluster.backend.namespace
        for i in range(self.limit):
            if self._over.is_set():
                return
            name = f"{self.prefix}-{i:03d}"
            obj = topic_object(name, self.cluster.name, self.trace if i == 0 else None)
            try:
                if self.create is not None:
                    self.create({**obj, "metadata": {**obj["metadata"], "namespace": ns}})
                else:
                    self.cluster.backend.kubectl(
                        "apply", "-n", ns, "-f", "-", input=json.dumps(obj)
                    )
            except Exception as exc:
                self.errors.append(f"{name}: {exc!r}")
            self.applied[name] = time.time()
            time.sleep(self.window_every_s if self._window.is_set() else self.every_s)

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout=timeout)
