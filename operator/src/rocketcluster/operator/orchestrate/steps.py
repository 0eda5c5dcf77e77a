"""The steps a decision can ask for, and why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StepKind(StrEnum):
    DONE = "Done"  # nothing to do
    WAIT = "Wait"  # something is in progress; look again next tick
    DELETE_POD = "DeletePod"  # its workload recreates it from the current template
    SWITCHOVER = "Switchover"  # make ``target`` the group's master
    APPLY_MEMBER = "ApplyMember"  # roll one controller member (apply its Deployment)
    TRANSFER_LEADERSHIP = "TransferLeadership"
    BLOCKED = "Blocked"  # stopped, for a reason a person should read


class RestartReason(StrEnum):
    SPEC_CHANGED = "SpecChanged"  # the pod hash differs from the rendered one
    NOT_READY = "NotReadyAndStale"  # stale and not serving: restart it first


@dataclass(frozen=True)
class Step:
    kind: StepKind
    reason: str = ""
    pod: str | None = None
    target: int | None = None  # broker id or controller member id
    restart: RestartReason | None = None

    @property
    def acts(self) -> bool:
        return self.kind not in (StepKind.DONE, StepKind.WAIT, StepKind.BLOCKED)


def done(reason: str = "") -> Step:
    return Step(StepKind.DONE, reason)


def wait(reason: str) -> Step:
    return Step(StepKind.WAIT, reason)


def blocked(reason: str) -> Step:
    return Step(StepKind.BLOCKED, reason)
