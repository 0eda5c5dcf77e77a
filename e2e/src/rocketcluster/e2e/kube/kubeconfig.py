"""A kubeconfig for the emulator: plain HTTP on loopback, no credentials (the
emulator has no authentication), written atomically so a reader never sees half."""

from __future__ import annotations

from pathlib import Path

import yaml

from rocketcluster.e2e.kube.atomic import write_atomic

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
    text = yaml.safe_dump(kubeconfig(server, namespace), sort_keys=False)
    write_atomic(path, text.encode(), mode=0o600)
    return path
