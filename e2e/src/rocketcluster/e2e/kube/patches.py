"""The three PATCH languages of the Kubernetes API, as pure functions on JSON values.

- JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists are replaced.
- Strategic merge patch: a merge patch in which some lists of built-in types merge
  element by element on a key (containers by ``name``, volumeMounts by
  ``mountPath``…), with the directives kubectl's three-way diff emits
  (``$patch``, ``$setElementOrder/…``, ``$retainKeys``, ``$deleteFromPrimitiveList/…``).
  The merge keys come from :data:`MERGE_KEYS` (field name → key), which covers the
  fields a workload manifest uses, not every Go struct tag of Kubernetes.
- JSON patch (RFC 6902): add, remove, replace, move, copy, test.

Every function returns a new value and never changes its arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied (the API server answers 422 or 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Field name → merge key, for lists whose patchStrategy is "merge" in the core types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
# Lists of scalars that merge as sets.
PRIMITIVE_MERGE = frozenset({"finalizers"})
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})


def _merge_key(path: tuple[str, ...], field: str) -> str | None:
    if field == "ports":
        # A container's ports merge on containerPort, a Service's on port; the
        # ports of an Endpoints subset are atomic.
        if len(path) >= 1 and path[-1] in _CONTAINER_LISTS:
            return "containerPort"
        if path[-1:] == ("spec",):
            return "port"
        return None
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to a built-in object."""
    return _smp_map(target if isinstance(target, Mapping) else {}, patch, ())


def _smp_map(target: Mapping[str, Any], patch: Any, path: tuple[str, ...]) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(target)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = list(value or [])
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = list(value or [])
            out[field] = [v for v in out.get(field) or [] if v not in drop]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            merged = _smp_list(out.get(key), value, path, key)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, Mapping):
            merged = _smp_map(out.get(key) or {}, value, (*path, key))
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = copy.deepcopy(value)
    for field, order in orders.items():
        if isinstance(out.get(field), list):
            out[field] = _reorder(out[field], order, _merge_key(path, field))
    return out


def _smp_list(target: Any, patch: list[Any], path: tuple[str, ...], field: str) -> Any:
    current = list(target) if isinstance(target, list) else []
    if field in PRIMITIVE_MERGE:
        out = list(current)
        for v in patch:
            if v not in out:
                out.append(copy.deepcopy(v))
        return out
    key = _merge_key(path, field)
    if key is None or not all(isinstance(e, Mapping) for e in patch):
        return copy.deepcopy(patch)
    if any(e.get("$patch") == "replace" for e in patch):
        return [copy.deepcopy(e) for e in patch if e.get("$patch") != "replace"]
    out = [dict(e) if isinstance(e, Mapping) else e for e in current]
    for element in patch:
        match = next(
            (
                i
                for i, e in enumerate(out)
                if isinstance(e, Mapping) and e.get(key) == element.get(key)
            ),
            None,
        )
        if element.get("$patch") == "delete":
            if match is not None:
                del out[match]
            continue
        if match is None:
            out.append({k: copy.deepcopy(v) for k, v in element.items() if k != "$patch"})
        else:
            out[match] = _smp_map(out[match], element, (*path, field))
    return out


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, Mapping) else item

    wanted = [ident(o) for o in order]
    ranked = sorted(
        range(len(items)),
        key=lambda i: (
            wanted.index(ident(items[i])) if ident(items[i]) in wanted else len(wanted),
            i,
        ),
    )
    return [items[i] for i in ranked]


# --- RFC 6902 -------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PatchError(f"path {path!r}: {token!r} not found")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"path {path!r} not found")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"path {path!r}: index out of range")
    else:
        raise PatchError(f"path {path!r}: parent is not a container")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise PatchError(f"path {path!r} not found")


def json_patch(target: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902; a failing ``test`` or a missing path refuses the whole patch."""
    if not isinstance(operations, Sequence) or isinstance(operations, str | bytes):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test operation failed at {path!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc
