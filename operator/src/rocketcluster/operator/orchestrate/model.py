"""What the operator observes of a cluster, as plain immutable values — the input of
every decision in this package."""

from __future__ import annotations

from dataclasses import dataclass, field

# The brokers' maxTimeNotCatchup (8 s, BrokerProcessConfig) and a few SyncStateSet
# upkeep rounds: a slave still listed this long after it became ready has caught up.
CATCH_UP_GRACE_S = 12.0


@dataclass(frozen=True)
class PodState:
    """A pod as the API server shows it (and, for brokers, as its admin API does)."""

    name: str
    ready: bool
    pod_hash: str | None
    ip: str | None = None
    deleting: bool = False
    exists: bool = True
    # Seconds since the pod last changed readiness (started, or stopped being ready).
    ready_for_s: float = 0.0
    restarts: int = 0
    broker_id: int | None = None  # from the broker's own admin API
    role: str | None = None
    # Seconds since the group's master last saw this slave hold all it had (from the
    # master's admin API; None: not reported, or never caught up since it connected).
    caught_up_ago_s: float | None = None
    node: str | None = None  # spec.nodeName (None: not scheduled yet)


@dataclass(frozen=True)
class GroupView:
    """A broker group as the controllers see it."""

    master_id: int | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int = 0
    writable: bool = True


@dataclass(frozen=True)
class GroupObservation:
    name: str
    desired_hash: str
    desired_replicas: int
    pods: tuple[PodState, ...]
    view: GroupView | None  # None: the controllers did not answer
    min_in_sync: int = 1
    replicated: bool = True
    # The master reports when each slave last caught up (brokers before it do not).
    catch_up_reported: bool = False

    def pod_of(self, broker_id: int | None) -> PodState | None:
        return next((p for p in self.pods if p.broker_id == broker_id), None)

    @property
    def master_pod(self) -> PodState | None:
        return None if self.view is None else self.pod_of(self.view.master_id)

    def in_sync(self, pod: PodState) -> bool:
        return (
            self.view is not None
            and pod.broker_id is not None
            and pod.broker_id in self.view.sync_state_set
        )

    def back_in_sync(self, pod: PodState) -> bool:
        """In the SyncStateSet because it caught up *since it last became ready*. The
        set alone is not proof: the master drops a replica only after
        maxTimeNotCatchup without catching up, so a slave restarted and ready within
        that time is still listed while it lags. The master's report of when it last
        caught up says it; from a master that does not report it, a listing that
        outlived the grace is proof enough."""
        if not self.in_sync(pod):
            return False
        if pod is self.master_pod:
            return True
        if self.catch_up_reported:
            return pod.caught_up_ago_s is not None and pod.caught_up_ago_s <= pod.ready_for_s
        return pod.ready_for_s >= CATCH_UP_GRACE_S


@dataclass(frozen=True)
class MemberState:
    """One controller member: its Deployment, its pod and its Raft view."""

    index: int
    name: str
    desired_hash: str
    applied_hash: str | None  # the Deployment's template in the API (None: no Deployment)
    pod: PodState | None
    leader_id: int | None = None  # whom this member believes leads
    term: int | None = None

    @property
    def member_id(self) -> int:
        return self.index + 1


@dataclass(frozen=True)
class ControllerObservation:
    members: tuple[MemberState, ...]

    @property
    def leader_id(self) -> int | None:
        """The leader a majority of answering members agree on."""
        votes: dict[int, int] = {}
        for m in self.members:
            if m.leader_id is not None and m.pod is not None and m.pod.ready:
                votes[m.leader_id] = votes.get(m.leader_id, 0) + 1
        quorum = len(self.members) // 2 + 1
        agreed = [leader for leader, n in votes.items() if n >= quorum]
        return agreed[0] if agreed else None


@dataclass(frozen=True)
class Attempts:
    """Memory of failed steps, kept by the shell between ticks (lost on restart,
    which only means a fresh try)."""

    switchover_failures: dict[str, int] = field(default_factory=dict)
    last_switchover_error: dict[str, str] = field(default_factory=dict)
