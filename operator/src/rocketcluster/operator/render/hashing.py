"""The pod hash: what a pod was rendered from, stamped on its template as an
annotation. A pod whose hash differs from the current one must be restarted (in the
roller's order) — this is how every spec change that needs a restart reaches the
pods, whether it changed the pod template or only the config files."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def pod_hash(template_spec: dict[str, Any], settings: dict[str, Any]) -> str:
    """A short stable digest of the pod spec and the config settings its processes
    read at start."""
    text = json.dumps({"spec": template_spec, "settings": settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
