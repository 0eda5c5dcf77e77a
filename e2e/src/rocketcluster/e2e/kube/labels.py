"""Label and field selectors, as the API server and the controllers evaluate them.

Two spellings of one idea: the query-string form (``app=web,tier in (a,b),!canary``)
that ``?labelSelector=`` carries, and the ``LabelSelector`` object
(``matchLabels`` + ``matchExpressions``) that StatefulSets, Deployments and PDBs
carry. Both parse to a tuple of :class:`Requirement`; a selector matches when all of
its requirements do. Pure functions, no state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector the API server refuses (400 BadRequest); the message quotes it."""


@dataclass(frozen=True)
class Requirement:
    key: str
    # "in", "notin", "exists", "!"; an equality is "in" (or "notin") one value, as
    # the API server's own parser makes it
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


Selector = tuple[Requirement, ...]

_SET_RE = re.compile(r"^\s*(!)?\s*([A-Za-z0-9_./-]+)\s*(?:\s(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> Selector:
    """Parse the ``labelSelector`` query parameter (equality- and set-based)."""
    if not text:
        return ()
    out = []
    for part in _split_top(text):
        eq = _EQ_RE.match(part)
        if eq:
            key, op, value = eq.groups()
            out.append(Requirement(key, "notin" if op == "!=" else "in", frozenset({value})))
            continue
        st = _SET_RE.match(part)
        if not st:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
        bang, key, op, values = st.groups()
        if op:
            if bang:
                raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
            vals = frozenset(v.strip() for v in values.split(",") if v.strip())
            out.append(Requirement(key, op, vals))
        else:
            out.append(Requirement(key, "!" if bang else "exists"))
    return tuple(out)


_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def from_label_selector(selector: Mapping[str, Any] | None) -> Selector:
    """A ``LabelSelector`` object; an empty one matches everything, as in apps/v1."""
    if not selector:
        return ()
    out = [
        Requirement(k, "in", frozenset({str(v)}))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        op = _EXPR_OPS.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(f"{expr.get('operator')!r} is not a valid selector operator")
        out.append(Requirement(expr["key"], op, frozenset(expr.get("values") or ())))
    return tuple(out)


def from_match_labels(labels: Mapping[str, str] | None) -> Selector:
    """A Service's ``spec.selector`` (equality only). None or empty selects nothing —
    callers decide that, since for a Service it means "endpoints managed by hand"."""
    return tuple(Requirement(k, "in", frozenset({str(v)})) for k, v in (labels or {}).items())


def matches(selector: Selector, labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in selector)


@dataclass(frozen=True)
class FieldRequirement:
    path: tuple[str, ...]
    equal: bool
    value: str


def parse_field_selector(text: str | None) -> tuple[FieldRequirement, ...]:
    """``metadata.name=x,metadata.namespace!=y,status.phase=Running``: any dotted
    field of the object (the real server allows a per-resource subset)."""
    if not text:
        return ()
    out = []
    for part in _split_top(text):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError(f"invalid field selector: {part.strip()!r}")
        path, op, value = m.groups()
        out.append(FieldRequirement(tuple(path.split(".")), op != "!=", value))
    return tuple(out)


def _field(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return ""
        node = node.get(key)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def field_matches(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all((_field(obj, r.path) == r.value) == r.equal for r in requirements)
