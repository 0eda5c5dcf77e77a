"""Server-side printing: what ``kubectl get`` shows comes from the API server as a
``meta.k8s.io/v1`` Table (kubectl asks with ``Accept: …;as=Table``). A custom
resource's columns are its CRD's ``additionalPrinterColumns``, evaluated with the
JSONPath subset those use; every other kind gets Name and Age, as a CRD without
columns does. Pure.

Supported JSONPath: ``.field``, ``[n]``, ``[*]`` and filters ``[?(@.a.b=="v")]`` /
``!=``, the forms printer columns are written in.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

_TOKEN = re.compile(
    r"\.(?P<field>[A-Za-z0-9_-]+)"
    r"|\[(?P<index>-?\d+)\]"
    r"|\[(?P<star>\*)\]"
    r"|\[\?\(@(?P<path>(?:\.[A-Za-z0-9_-]+)+)\s*(?P<op>==|!=)\s*(?P<q>['\"])(?P<value>.*?)(?P=q)\)\]"
)


class JsonPathError(ValueError):
    """A printer column's path outside the supported subset."""


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    steps, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JsonPathError(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        steps.append(m)
        pos = m.end()
    return steps


def _get(obj: Any, fields: Sequence[str]) -> Any:
    for f in fields:
        if not isinstance(obj, Mapping) or f not in obj:
            return None
        obj = obj[f]
    return obj


def find(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj`` (empty: none)."""
    current = [obj]
    for step in _steps(path):
        nxt: list[Any] = []
        for value in current:
            if step["field"] is not None:
                if isinstance(value, Mapping) and step["field"] in value:
                    nxt.append(value[step["field"]])
            elif step["index"] is not None:
                i = int(step["index"])
                if isinstance(value, list) and -len(value) <= i < len(value):
                    nxt.append(value[i])
            elif step["star"] is not None:
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, Mapping):
                    nxt.extend(value.values())
            elif isinstance(value, list):
                fields = step["path"].strip(".").split(".")
                for item in value:
                    found = _get(item, fields)
                    text = "" if found is None else _scalar(found)
                    if (text == step["value"]) == (step["op"] == "=="):
                        nxt.append(item)
        current = nxt
    return current


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def human_duration(seconds: float) -> str:
    """Kubernetes' HumanDuration: ``42s``, ``3m10s``, ``5h``, ``2d4h``, ``3y``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        days = h // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{h // (24 * 365)}y"


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any], now: datetime.datetime) -> Any:
    values = find(obj, str(column.get("jsonPath", "")))
    if not values or values[0] is None:
        return None
    kind = column.get("type", "string")
    value = values[0]
    if kind == "date":
        try:
            then = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
        return human_duration((now - then).total_seconds())
    if kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if len(values) > 1:
        return ",".join(_scalar(v) for v in values)
    return _scalar(value) if not isinstance(value, dict | list) else str(value)


def table(
    objects: Sequence[Mapping[str, Any]],
    columns: Sequence[Mapping[str, Any]],
    resource_version: str,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The Table for ``objects`` (no ``columns``: Name and Age)."""
    now = now or datetime.datetime.now(datetime.UTC)
    cols = list(columns) or [AGE_COLUMN]
    definitions = [NAME_COLUMN] + [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": int(c.get("priority", 0)),
        }
        for c in cols
    ]
    rows = [
        {
            "cells": [obj.get("metadata", {}).get("name", "")] + [_cell(obj, c, now) for c in cols],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            },
        }
        for obj in objects
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """Whether a request's Accept header asks for a Table first."""
    first = accept.split(",", maxsplit=1)[0]
    return "as=Table" in first.replace(" ", "")
