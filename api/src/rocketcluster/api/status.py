"""Status of the custom resources, as the operator writes it: the conditions people
and tools read (Ready, Progressing, Degraded, Warning reasons), and what the
controllers say about every broker group."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Status(BaseModel):
    model_config = ConfigDict(
        extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    WARNING = "Warning"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(_Status):
    """One condition, shaped like Kubernetes' own ``metav1.Condition``."""

    type: str
    status: ConditionStatus
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int | None = None


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def merge_conditions(old: list[Condition], new: list[Condition], at: str) -> list[Condition]:
    """``new`` conditions, keeping each one's lastTransitionTime while its status
    stays the same (so the time says when it last changed, as kubectl shows it)."""
    previous = {c.type: c for c in old}
    merged = []
    for cond in new:
        before = previous.get(cond.type)
        when = before.last_transition_time if before and before.status == cond.status else at
        merged.append(cond.model_copy(update={"last_transition_time": when or at}))
    return merged


def ready_conditions(
    body: dict[str, Any], ready: bool, reason: str, message: str
) -> list[Condition]:
    """The conditions of a resource that has only Ready (RocketTopic, RocketUser …),
    merged with what ``body``'s status says, for ``body``'s generation."""
    old = body.get("status") or {}
    generation = body["metadata"].get("generation")
    condition = Condition(
        type="Ready",
        status="True" if ready else "False",
        reason=reason,
        message=message[:1000],
        observed_generation=generation,
    )
    previous = [Condition.model_validate(c) for c in old.get("conditions") or []]
    return merge_conditions(previous, [condition], now_rfc3339())


class ControllerMemberStatus(_Status):
    id: int
    name: str
    ready: bool = False
    leader: bool = False


class ControllerStatus(_Status):
    members: list[ControllerMemberStatus] = Field(default_factory=list)
    leader: int | None = None
    term: int | None = None


class GroupStatus(_Status):
    """A broker group as the controllers and the API server see it."""

    name: str
    replicas: int = 0
    ready_replicas: int = 0
    master: str | None = Field(default=None, description="the master's pod")
    master_broker_id: int | None = None
    master_epoch: int | None = None
    sync_state_set: list[str] = Field(default_factory=list, description="pods in the SyncStateSet")
    sync_state_set_epoch: int | None = None
    writable: bool = True
    endpoint: str = ""


class RolloutPart(_Status):
    """A part (``controllers`` or a broker group) whose roll has started and not yet
    settled: the next part waits for it, whichever operator process is running."""

    name: str
    started_at: str = Field(description="RFC 3339: when its first restart was ordered")


class RolloutAction(_Status):
    """The last disruptive action, written before it is taken (phase Intent) and after
    (Done): an operator that starts again after an Intent knows an action may be in
    flight (a switchover the controllers may still be running)."""

    part: str
    kind: str
    pod: str | None = None
    target: int | None = None
    phase: Literal["Intent", "Done"]
    at: str = Field(description="RFC 3339")
    holder: str = Field(default="", description="the operator process that acted")


class SwitchoverAttempts(_Status):
    """Failed switchovers of a group in a row, for the spec (pod hash) they rolled to:
    a new spec starts the count again."""

    group: str
    hash: str = ""
    failures: int = 0
    last_error: str = ""


class RolloutStatus(_Status):
    """What a roll or a group's removal needs to resume after the operator restarts
    or another replica takes over; the operator writes it before each disruptive
    action, conditional on the object's resourceVersion. Lists, not maps: a merge
    patch replaces a list but never drops an absent map key."""

    parts: list[RolloutPart] = Field(default_factory=list)
    last_action: RolloutAction | None = None
    switchovers: list[SwitchoverAttempts] = Field(default_factory=list)
    removing: list[str] = Field(
        default_factory=list, description="groups whose objects are being deleted"
    )


class GroupFeatures(_Status):
    name: str
    features: list[str] = Field(default_factory=list)


class FeaturesStatus(_Status):
    """What the operator may write that only newer code reads (api/features.py): a
    feature is listed once every member reports it, and dropped only when a member
    that answers lacks it (a member that does not answer changes nothing), so a
    broker missing one tick neither changes a rendered pod nor its group's roll.
    Lists, not maps: a merge patch replaces a list but never drops an absent key."""

    controllers: list[str] = Field(
        default_factory=list, description="features every controller member reports"
    )
    groups: list[GroupFeatures] = Field(
        default_factory=list, description="per broker group: features all its brokers report"
    )


class RocketClusterStatus(_Status):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    masters: str = Field(default="", description="groups with a master / groups, e.g. 2/2")
    controller: ControllerStatus | None = None
    groups: list[GroupStatus] = Field(default_factory=list)
    client_endpoints: str = Field(
        default="", description="what a ClientConfiguration takes, ';'-separated"
    )
    image: str = ""
    operation: str = Field(default="", description="what the operator is doing now")
    rollout: RolloutStatus | None = None
    features: FeaturesStatus | None = None


class CatalogueStatus(_Status):
    """Status of a RocketTopic or RocketConsumerGroup."""

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    name: str = Field(default="", description="the name on the cluster")
