"""The roll's memory, kept in the RocketCluster's status (``status.rollout``) instead
of one operator process's memory: which parts are rolling, the last disruptive action
(written before it is taken), failed switchovers, groups being removed.

An operator that restarts — or a standby that takes over — reads it back and goes on
where the last one stopped: a part that was rolling keeps the next part waiting until
its last restarted pod is back in sync (an operator restarted right after deleting a
group's last stale pod used to see current hashes and start the next group early), a
switchover ordered just before the restart is given time to finish before another is
asked for, and a group whose objects were half deleted is deleted to the end.

Pure: values in, values out; the reconciler writes them (``reconcile.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from rocketcluster.api.status import (
    RolloutAction,
    RolloutPart,
    RolloutStatus,
    SwitchoverAttempts,
)
from rocketcluster.operator.orchestrate.model import Attempts
from rocketcluster.operator.orchestrate.steps import Step, StepKind

# How long a switchover ordered by an operator that then stopped may still be running
# in the controllers (the handover's phases: prepare, elect, the new master's
# confirmation): no second one is asked for meanwhile.
SWITCHOVER_SETTLE_S = 15.0


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Rollout:
    """``status.rollout`` with the operations the reconciler needs; every change
    returns a new value (compare with ``==`` to know whether to write)."""

    status: RolloutStatus = field(default_factory=RolloutStatus)

    @classmethod
    def from_status(cls, status: dict[str, object] | None) -> Rollout:
        raw = (status or {}).get("rollout")
        return cls(RolloutStatus.model_validate(raw) if isinstance(raw, dict) else RolloutStatus())

    def to_json(self) -> dict[str, object]:
        """Every key, nulls included: as a merge patch it replaces what is stored (a
        null deletes the last action once there is none)."""
        data = self.status.model_dump(mode="json", by_alias=True)
        return dict(data)

    # -- parts ----------------------------------------------------------------------

    def rolling(self, part: str) -> bool:
        return any(p.name == part for p in self.status.parts)

    def started_at(self, part: str) -> datetime | None:
        for p in self.status.parts:
            if p.name == part:
                return parse_time(p.started_at)
        return None

    def started(self, part: str, at: datetime) -> Rollout:
        if self.rolling(part):
            return self
        parts = [*self.status.parts, RolloutPart(name=part, started_at=rfc3339(at))]
        return self._with(parts=parts)

    def finished(self, part: str) -> Rollout:
        if not self.rolling(part):
            return self
        return self._with(parts=[p for p in self.status.parts if p.name != part])

    # -- the last action ------------------------------------------------------------

    def intent(self, part: str, step: Step, at: datetime, holder: str) -> Rollout:
        """``step`` about to be taken on ``part`` (which is rolling from now on,
        unless the action is a scale-in's)."""
        action = RolloutAction(
            part=part,
            kind=step.kind.value,
            pod=step.pod,
            target=step.target,
            phase="Intent",
            at=rfc3339(at),
            holder=holder,
        )
        return self._with(last_action=action)

    def done(self, at: datetime) -> Rollout:
        action = self.status.last_action
        if action is None or action.phase == "Done":
            return self
        done = action.model_copy(update={"phase": "Done", "at": rfc3339(at)})
        return self._with(last_action=done)

    def switchover_in_flight(self, part: str, now: datetime) -> str | None:
        """Why ``part`` waits: a switchover was ordered (its Intent written) by an
        operator that stopped before it saw the answer, less than
        SWITCHOVER_SETTLE_S ago."""
        action = self.status.last_action
        if (
            action is None
            or action.part != part
            or action.phase != "Intent"
            or action.kind != StepKind.SWITCHOVER.value
        ):
            return None
        at = parse_time(action.at)
        if at is None:
            return None
        age = (now - at).total_seconds()
        if age >= SWITCHOVER_SETTLE_S:
            return None
        return (
            f"a switchover to broker {action.target} ordered {age:.0f}s ago by "
            f"{action.holder or 'an earlier operator'} may still be running"
        )

    # -- switchover failures --------------------------------------------------------

    def attempts(self, hashes: dict[str, str | None]) -> Attempts:
        """The failures that count: those for each group's current desired hash."""
        attempts = Attempts()
        for record in self.status.switchovers:
            if record.group in hashes and record.hash == (hashes[record.group] or ""):
                attempts.switchover_failures[record.group] = record.failures
                attempts.last_switchover_error[record.group] = record.last_error
        return attempts

    def switchover_failed(self, group: str, desired_hash: str | None, error: str) -> Rollout:
        wanted = desired_hash or ""
        before = next((r for r in self.status.switchovers if r.group == group), None)
        failures = before.failures + 1 if before is not None and before.hash == wanted else 1
        record = SwitchoverAttempts(
            group=group, hash=wanted, failures=failures, last_error=error[:1000]
        )
        others = [r for r in self.status.switchovers if r.group != group]
        return self._with(switchovers=[*others, record])

    def switchover_succeeded(self, group: str) -> Rollout:
        if not any(r.group == group for r in self.status.switchovers):
            return self
        return self._with(switchovers=[r for r in self.status.switchovers if r.group != group])

    # -- groups being removed -------------------------------------------------------

    def removing(self, group: str) -> Rollout:
        if group in self.status.removing:
            return self
        return self._with(removing=sorted([*self.status.removing, group]))

    def removed(self, group: str) -> Rollout:
        if group not in self.status.removing:
            return self
        leftover = [r for r in self.status.switchovers if r.group != group]
        return self._with(
            removing=[g for g in self.status.removing if g != group],
            parts=[p for p in self.status.parts if p.name != group],
            switchovers=leftover,
        )

    def _with(self, **changes: object) -> Rollout:
        return Rollout(self.status.model_copy(update=changes))


__all__ = ["SWITCHOVER_SETTLE_S", "Rollout", "parse_time", "rfc3339"]
