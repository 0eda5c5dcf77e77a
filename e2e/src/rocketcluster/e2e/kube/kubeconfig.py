"""A kubeconfig for the emulator: plain HTTP on loopback, no credentials (the
emulator has no authentication), written atomically so a reader never sees half."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

CONTEXT = "rocketcluster-emulator"


def kubeconfig(server: str, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, namespace: str = "default") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig(server, namespace), sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
