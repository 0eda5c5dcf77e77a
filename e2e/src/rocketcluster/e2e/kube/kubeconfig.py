"""A kubeconfig for the emulator: loopback (HTTPS with the emulator's self-signed
certificate, or plain HTTP) and a bearer token (the
admin's, or a ServiceAccount's from TokenRequest), written atomically so a reader
never sees half, readable by its owner only."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from rocketcluster.e2e.kube.atomic import write_atomic

CONTEXT = "rocketcluster-emulator"


def kubeconfig(
    server: str, namespace: str = "default", token: str | None = None, ca: bytes | None = None
) -> dict[str, object]:
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token} if token else {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    server: str,
    namespace: str = "default",
    token: str | None = None,
    ca: bytes | None = None,
) -> Path:
    """``ca``: the PEM of the server's certificate authority (an ``https`` server;
    kubectl sends the token only over TLS)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig(server, namespace, token, ca), sort_keys=False)
    write_atomic(path, text.encode(), mode=0o600)
    return path
