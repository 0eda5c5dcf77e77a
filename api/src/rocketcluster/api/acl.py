"""ACL decisions, pure: whether a user may ``pub`` or ``sub`` on a topic or consumer
group (RocketMQ ACL 2.0's shape). Brokers decide every RPC with it; the console
decides what a signed-in user sees and may do with the same rules.

A user holds ``pub``/``sub`` rules per topic and ``sub`` rules per consumer group,
each naming one resource, a prefix ending in ``*`` or ``*`` alone; ``admin`` users
may do everything. A group's own system topics — ``%RETRY%<group>`` and
``%DLQ%<group>`` — are authorized as the group: ``sub`` on group G lets its consumers
read G's retry and dead-letter topics (in addition to any topic rule naming them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from rocketcluster.api.names import DLQ_PREFIX, RETRY_PREFIX
from rocketcluster.api.users import Action, PermissionSpec

DECISION_CACHE_MAX: Final = 4096


class Kind(StrEnum):
    TOPIC = "topic"
    GROUP = "group"


@dataclass(frozen=True, slots=True)
class _Rules:
    """One resource kind's allow rules, compiled: exact names, prefixes, ``*``."""

    exact: Mapping[str, frozenset[Action]]
    prefixes: tuple[tuple[str, frozenset[Action]], ...]
    everything: frozenset[Action]

    def allows(self, name: str, action: Action) -> bool:
        if action in self.everything or action in self.exact.get(name, ()):
            return True
        return any(action in acts for p, acts in self.prefixes if name.startswith(p))

    @classmethod
    def compile(cls, rules: Iterable[tuple[str, Iterable[Action]]]) -> _Rules:
        exact: dict[str, set[Action]] = {}
        prefixes: dict[str, set[Action]] = {}
        everything: set[Action] = set()
        for pattern, actions in rules:
            if pattern == "*":
                everything.update(actions)
            elif pattern.endswith("*"):
                prefixes.setdefault(pattern[:-1], set()).update(actions)
            else:
                exact.setdefault(pattern, set()).update(actions)
        return cls(
            {k: frozenset(v) for k, v in exact.items()},
            tuple((k, frozenset(v)) for k, v in prefixes.items()),
            frozenset(everything),
        )


@dataclass(slots=True)
class Principal:
    """An authenticated user and its permissions (decisions cached per resource)."""

    access_key: str
    admin: bool
    topics: _Rules
    groups: _Rules
    _decisions: dict[tuple[Kind, str, Action], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, access_key: str, admin: bool, permissions: Iterable[PermissionSpec]) -> Principal:
        permissions = list(permissions)
        return cls(
            access_key,
            admin,
            _Rules.compile((p.topic, p.actions) for p in permissions if p.topic is not None),
            _Rules.compile((p.group, p.actions) for p in permissions if p.group is not None),
        )

    def may(self, kind: Kind, name: str, action: Action) -> bool:
        if self.admin:
            return True
        key = (kind, name, action)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(kind, name, action)
            if len(self._decisions) >= DECISION_CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(self, kind: Kind, name: str, action: Action) -> bool:
        if kind is Kind.GROUP:
            return self.groups.allows(name, action)
        if self.topics.allows(name, action):
            return True
        if action is Action.SUB:
            for prefix in (RETRY_PREFIX, DLQ_PREFIX):
                if name.startswith(prefix):
                    return self.groups.allows(name[len(prefix) :], Action.SUB)
        return False
