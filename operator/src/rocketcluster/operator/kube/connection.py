"""Where the API server is and how to authenticate: in a pod, the service account;
elsewhere, a kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) — token, client
certificate or none, with its CA or ``insecure-skip-tls-verify``."""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICEACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(RuntimeError):
    pass


@dataclass(frozen=True)
class Connection:
    server: str
    token_file: Path | None = None
    token: str | None = None
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None
    verify: bool = True
    namespace: str = "default"

    def bearer(self) -> str | None:
        """The token, re-read from its file each time (projected tokens rotate)."""
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError:
                return None
        return self.token

    def httpx_verify(self) -> Any:
        if not self.verify:
            return False
        return self.ca_file or True


def in_cluster() -> Connection | None:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not (SERVICEACCOUNT / "token").exists():
        return None
    namespace_file = SERVICEACCOUNT / "namespace"
    return Connection(
        server=f"https://{host}:{port}",
        token_file=SERVICEACCOUNT / "token",
        ca_file=str(SERVICEACCOUNT / "ca.crt"),
        namespace=namespace_file.read_text().strip() if namespace_file.exists() else "default",
    )


def _materialise(data: str | None, path: str | None, suffix: str) -> str | None:
    """A kubeconfig's ``*-data`` (base64) as a file httpx can load."""
    if path:
        return path
    if not data:
        return None
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=suffix)  # noqa: SIM115
    with handle:
        handle.write(base64.b64decode(data))
    return handle.name


def from_kubeconfig(path: Path) -> Connection:
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    contexts = {c["name"]: c["context"] for c in config.get("contexts", [])}
    current = config.get("current-context") or next(iter(contexts), None)
    if current not in contexts:
        raise KubeConfigError(f"kubeconfig {path}: no context {current!r}")
    context = contexts[current]
    clusters = {c["name"]: c["cluster"] for c in config.get("clusters", [])}
    users = {u["name"]: u.get("user") or {} for u in config.get("users", [])}
    cluster = clusters.get(context.get("cluster"))
    if cluster is None:
        raise KubeConfigError(f"kubeconfig {path}: context {current!r} names no known cluster")
    user = users.get(context.get("user"), {})
    cert = _materialise(user.get("client-certificate-data"), user.get("client-certificate"), ".crt")
    key = _materialise(user.get("client-key-data"), user.get("client-key"), ".key")
    return Connection(
        server=cluster["server"].rstrip("/"),
        token=user.get("token"),
        token_file=Path(user["tokenFile"]) if user.get("tokenFile") else None,
        ca_file=_materialise(
            cluster.get("certificate-authority-data"), cluster.get("certificate-authority"), ".crt"
        ),
        client_cert=(cert, key) if cert and key else None,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        namespace=context.get("namespace", "default"),
    )


def discover() -> Connection:
    """In-cluster when running in a pod, else the kubeconfig."""
    found = in_cluster()
    if found is not None:
        return found
    path = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])
    path = path.expanduser()
    if not path.exists():
        raise KubeConfigError(
            f"no Kubernetes API: not in a pod, and no kubeconfig at {path} (set KUBECONFIG)"
        )
    return from_kubeconfig(path)
