"""The generated dashboards as the operator ships them: JSON files in this package's
``data/dashboards/`` (written by ``python -m rocketcluster.operator.monitoring.generate``,
byte for byte the chart's ``dashboards/``), read with the standard library only."""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

PACKAGE = "rocketcluster.operator.monitoring"
DATA_DIR = ("data", "dashboards")


class MissingDashboards(RuntimeError):
    """The package was built without its generated dashboards."""


def dashboard_dir() -> Traversable:
    folder = resources.files(PACKAGE)
    for part in DATA_DIR:
        folder = folder / part
    return folder


def dashboards() -> dict[str, dict[str, Any]]:
    """Every packaged dashboard by file name (``rocketcluster-overview.json`` …), in
    name order."""
    folder = dashboard_dir()
    found = (
        sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
        if folder.is_dir()
        else []
    )
    if not found:
        raise MissingDashboards(
            f"no dashboards in {PACKAGE}/{'/'.join(DATA_DIR)}: run "
            "python -m rocketcluster.operator.monitoring.generate"
        )
    return {f.name: json.loads(f.read_text(encoding="utf-8")) for f in found}
