"""Local mode's side of ``security.auth``: the users file and the admin token file
under the cluster's directory (``DIR/auth/``, mode 0600), what the operator keeps in
Secrets in Kubernetes.

``rocketctl local up`` merges the manifest's ``spec.users`` into the users file: a
user already there keeps its secret key (a restart must not invalidate clients), a
new one gets a random key, one the manifest dropped goes; users added with
``rocketctl user create`` stay. The
brokers re-read the file when it changes, so ``rocketctl user ...`` needs no restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from rocketcluster.api.auth import (
    AuthProcessConfig,
    UserCredentials,
    UsersFile,
    generate_admin_token,
    generate_secret_key,
    read_token,
    write_private,
)
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.users import UserSpec

AUTH_DIR: Final = "auth"
USERS_FILE: Final = "users.json"
ADMIN_TOKEN_FILE: Final = "admin-token"


def users_path(directory: Path) -> Path:
    return directory / AUTH_DIR / USERS_FILE


def admin_token_path(directory: Path) -> Path:
    return directory / AUTH_DIR / ADMIN_TOKEN_FILE


def local_admin_token(directory: Path) -> str | None:
    """The admin token of the local cluster in ``directory``; None when its auth is off."""
    path = admin_token_path(directory)
    return read_token(path) if path.exists() else None


def merge_users(current: UsersFile, users: list[UserSpec]) -> UsersFile:
    """``current`` with the manifest's ``users`` added or updated (permissions from the
    manifest, secret keys kept); a user the previous manifest had and this one does
    not is removed; users made with ``rocketctl user create`` stay."""
    wanted = {u.name for u in users}
    merged = {
        u.access_key: u
        for u in current.users
        if u.access_key in wanted or u.access_key not in current.manifest_users
    }
    for user in users:
        known = merged.get(user.name)
        key = known.secret_key if known is not None else generate_secret_key()
        merged[user.name] = UserCredentials.of(user, key)
    return UsersFile(users=list(merged.values()), manifest_users=sorted(wanted))


def prepare_local_auth(cluster: RocketCluster, directory: Path) -> AuthProcessConfig | None:
    """Write (or update) the users and admin token files for ``cluster``; the ``auth``
    its processes get, None when ``security.auth`` is off."""
    spec = cluster.spec.security.auth
    if not spec.enabled:
        return None
    users = users_path(directory)
    current = UsersFile.load(users) if users.exists() else UsersFile()
    merge_users(current, cluster.spec.users).save(users)
    token = admin_token_path(directory)
    if not token.exists():
        write_private(token, generate_admin_token() + "\n")
    return AuthProcessConfig(
        enabled=True,
        users_file=users,
        admin_token_file=token,
        clock_skew_seconds=spec.clock_skew_seconds,
    )
