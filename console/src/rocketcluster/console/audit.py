"""The audit log: every action a person takes through the console (offset resets,
DLQ resends, test sends), who, when, what exactly and how it ended, as one JSON line
appended to ``auditLog`` and logged."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("rocketcluster.console.audit")


class AuditLog:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, user: str, action: str, target: str, outcome: str, **detail: Any) -> None:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "user": user,
            "action": action,
            "target": target,
            "outcome": outcome,
            **detail,
        }
        line = json.dumps(entry, separators=(",", ":"), default=str)
        log.info("audit %s", line)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line + "\n")

    def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries first (the audit page)."""
        if self.path is None or not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()[-limit:]
        out = []
        for line in reversed(lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out
