"""``security.auth`` in Kubernetes, rendered (pure): the Secrets and their mounts.

- ``<cluster>-admin-token`` (or ``security.auth.adminTokenSecret``), key ``token``:
  made by the operator when missing, never overwritten; mounted into controllers and
  brokers (their admin API and /metrics want it), read by the operator and by the
  ServiceMonitor (``bearerTokenSecret``).
- ``<cluster>-user-<name>`` per user (``spec.users`` and RocketUsers), keys
  ``accessKey`` and ``secretKey``: made when missing (a random key), then the user's
  own; rotating is editing or deleting its data — as Strimzi's KafkaUser.
- ``<cluster>-users``, key ``users.json``: every user's keys and permissions, built
  by the reconciler from the two above and mounted into the brokers, which re-read it
  when the kubelet updates the mount (no restart, no pod hash change);
- ``<cluster>-console-session``, key ``sessionKey``: what the console signs its
  sign-in sessions with (``spec.console`` with auth on), shared by its replicas; made
  by the operator when missing (a random key), never overwritten — deleting its data
  signs everybody out. It stays when the console or auth is switched off, as the
  admin token does.

The rendered process configs only name the mounted files (``auth`` field).
"""

from __future__ import annotations

import base64
from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.auth import (
    ACCESS_KEY,
    ADMIN_TOKEN_KEY,
    SECRET_KEY,
    USERS_FILE_KEY,
    AuthProcessConfig,
    UserCredentials,
    UsersFile,
)
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.user_resource import (
    admin_token_secret_name,
    user_secret_name,
    users_secret_name,
)
from rocketcluster.api.users import UserSpec
from rocketcluster.operator.render.meta import K8sObject, metadata

AUTH_ROOT: Final = "/etc/rocketcluster-auth"
USERS_DIR: Final = f"{AUTH_ROOT}/users"
TOKEN_DIR: Final = f"{AUTH_ROOT}/admin"
USERS_VOLUME: Final = "auth-users"
TOKEN_VOLUME: Final = "auth-admin-token"
SESSION_KEY: Final = "sessionKey"
COMPONENT: Final = "auth"


def enabled(cluster: RocketCluster) -> bool:
    return cluster.spec.security.auth.enabled


def token_secret(cluster: RocketCluster) -> str:
    return admin_token_secret_name(cluster.name, cluster.spec.security.auth.admin_token_secret)


def process_auth(cluster: RocketCluster, *, users: bool) -> AuthProcessConfig:
    """The ``auth`` of a rendered process config (``users``: a broker's, with the users
    file; a controller only checks the admin token)."""
    spec = cluster.spec.security.auth
    if not spec.enabled:
        return AuthProcessConfig()
    return AuthProcessConfig(
        enabled=True,
        users_file=f"{USERS_DIR}/{USERS_FILE_KEY}" if users else None,  # type: ignore[arg-type]
        admin_token_file=f"{TOKEN_DIR}/{ADMIN_TOKEN_KEY}",  # type: ignore[arg-type]
        clock_skew_seconds=spec.clock_skew_seconds,
    )


def volumes(
    cluster: RocketCluster, *, users: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container mounts) of the auth Secrets; none when auth is off."""
    if not enabled(cluster):
        return [], []
    vols = [{"name": TOKEN_VOLUME, "secret": {"secretName": token_secret(cluster)}}]
    mounts = [{"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}]
    if users:
        vols.append(
            {"name": USERS_VOLUME, "secret": {"secretName": users_secret_name(cluster.name)}}
        )
        mounts.append({"name": USERS_VOLUME, "mountPath": USERS_DIR, "readOnly": True})
    return vols, mounts


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret_text(secret: dict[str, Any] | None, key: str) -> str | None:
    """A Secret's value under ``key`` (``data`` is base64; ``stringData`` as written),
    None when absent or unreadable."""
    if not secret:
        return None
    raw = (secret.get("data") or {}).get(key)
    if raw is not None:
        try:
            return base64.b64decode(raw).decode().strip() or None
        except ValueError:
            return None
    text = (secret.get("stringData") or {}).get(key)
    return text.strip() or None if isinstance(text, str) else None


def _secret(cluster: RocketCluster, name: str, data: dict[str, str]) -> K8sObject:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(cluster, name, COMPONENT),
        "type": "Opaque",
        "data": {k: _b64(v) for k, v in data.items()},
    }


def admin_token_secret(cluster: RocketCluster, token: str) -> K8sObject:
    return _secret(cluster, token_secret(cluster), {ADMIN_TOKEN_KEY: token})


def console_session_secret_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-console-session"


def console_session_secret(cluster: RocketCluster, key: str) -> K8sObject:
    """The console's session signing key (see the module's docstring)."""
    return _secret(cluster, console_session_secret_name(cluster), {SESSION_KEY: key})


def console_needs_session_key(cluster: RocketCluster) -> bool:
    """The console signs people in only with auth on: then its replicas share a key."""
    return enabled(cluster) and cluster.spec.console.enabled


def user_secret(
    cluster: RocketCluster, user: UserSpec, secret_key: str, owner: dict[str, Any] | None = None
) -> K8sObject:
    """One user's keys; owned by its RocketUser when it has one (deleted with it),
    else by the RocketCluster (a ``spec.users`` entry)."""
    secret = _secret(
        cluster,
        user_secret_name(cluster.name, user.name),
        {ACCESS_KEY: user.name, SECRET_KEY: secret_key},
    )
    if owner is not None:
        secret["metadata"]["ownerReferences"] = [owner]
    return secret


def users_secret(cluster: RocketCluster, users: list[UserCredentials]) -> K8sObject:
    """The users file the brokers mount (users sorted by name: one content, one digest)."""
    body = UsersFile(users=sorted(users, key=lambda u: u.access_key)).dumps()
    return _secret(cluster, users_secret_name(cluster.name), {USERS_FILE_KEY: body})


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", kube.API_VERSION),
        "kind": body["kind"],
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
