"""What `rocketctl demo cluster` needs when the manifest turns security on
(examples/secure.yaml): the user whose keys the demo's clients sign with, the CA they
trust, and the check that the manifest has such a user.

The demo's clients act as an application: the official producers send to ``orders``
and the lean client's audit reads it back as consumer group ``audit``, so with
``security.auth`` they need a user allowed pub and sub on the topic and sub on the
group — decided by the brokers' own rules (``Principal``), so the check cannot
disagree with what the brokers will do. An application user is preferred to an
admin, who would pass every check and show nothing of the permissions. The admin
calls (who is master, the controllers' history) use the admin token instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.tls import ClientTls
from rocketcluster.api.users import Action, UserSpec
from rocketcluster.broker.security.auth import Kind, Principal
from rocketcluster.ctl.local.auth import users_path

# gRPC reads it once per process, when a channel first needs the default roots: the
# official client's channels do (grpc.ssl_channel_credentials() with no roots), ours
# pass the CA explicitly and do not.
ROOTS_ENV: Final = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"


def _needs(topic: str, group: str) -> list[tuple[Kind, str, Action]]:
    return [
        (Kind.TOPIC, topic, Action.PUB),
        (Kind.TOPIC, topic, Action.SUB),
        (Kind.GROUP, group, Action.SUB),
    ]


def _missing(user: UserSpec, topic: str, group: str) -> list[str]:
    """What ``user`` may not do of what the demo does, as "pub on topic orders"."""
    principal = Principal.of(user.name, user.admin, user.permissions)
    return [
        f"{action.value} on {kind.value} {name}"
        for kind, name, action in _needs(topic, group)
        if not principal.may(kind, name, action)
    ]


def demo_user(model: RocketCluster, topic: str, group: str) -> UserSpec | None:
    """The user the demo signs with: the first application user (not admin) allowed
    everything the demo does, else the first such admin; None when there is none
    (or when auth is off)."""
    if not model.spec.security.auth.enabled:
        return None
    able = [u for u in model.spec.users if not _missing(u, topic, group)]
    return next((u for u in able if not u.admin), able[0] if able else None)


def security_problems(model: RocketCluster, topic: str, group: str) -> list[str]:
    """Why the demo could not sign its requests on ``model`` (empty: it can)."""
    if not model.spec.security.auth.enabled or demo_user(model, topic, group) is not None:
        return []
    lacking = "; ".join(
        f"{u.name} lacks {', '.join(_missing(u, topic, group))}" for u in model.spec.users
    )
    return [
        "security.auth is on: add to spec.users a user allowed pub and sub on topic "
        f"{topic!r} and sub on consumer group {group!r} (the demo produces and audits "
        "with its keys" + (f"; {lacking}" if lacking else "; spec.users is empty") + ")"
    ]


@dataclass(frozen=True)
class DemoAccess:
    """How the demo's clients reach a started cluster: ``tls`` for ours (the CA,
    passed explicitly), ``official_tls`` for the official client (which trusts the CA
    through ROOTS_ENV), and the keys they sign with (None: auth is off)."""

    ca_file: Path | None = None
    user: UserSpec | None = None
    credentials: tuple[str, str] | None = None

    @property
    def tls(self) -> ClientTls | None:
        return ClientTls(ca_file=self.ca_file) if self.ca_file is not None else None

    @property
    def official_tls(self) -> bool:
        return self.ca_file is not None

    def official_endpoints(self, endpoints: str) -> str:
        """The access point for the official client: under TLS the first endpoint
        alone. Client 5.1.2 joins several IPv4 endpoints into one gRPC target
        (``ipv4:a:8081,b:8091``) whose name no certificate can match, so every
        handshake fails hostname verification; one endpoint answers the routes of
        every group, and the sends then go to each group's own endpoint."""
        if self.ca_file is None:
            return endpoints
        return next(e for e in endpoints.split(";") if e)


def prepare_access(
    model: RocketCluster, state: dict[str, Any], directory: Path, topic: str, group: str
) -> DemoAccess:
    """After ``LocalRuntime.up``: the demo user's keys from the users file it wrote, and
    the CA it made — set as the official client's default roots for this process, so
    this must run before the first official-client channel is made (gRPC reads the
    variable once). Hence also one secure demo per process: the next would make a
    new CA that this process's official clients no longer learn (rocketctl runs one)."""
    ca_file: Path | None = None
    recorded = state.get("tls")
    if recorded:
        ca_file = Path(recorded["caFile"])
        os.environ[ROOTS_ENV] = str(ca_file)
    user = demo_user(model, topic, group)
    credentials = None
    if user is not None:
        path = users_path(directory)
        found = UsersFile.load(path).find(user.name)
        if found is None:  # up writes every spec.users entry: a bug, not a manifest error
            raise RuntimeError(f"user {user.name!r} is not in {path} after the start")
        credentials = (found.access_key, found.secret_key)
    return DemoAccess(ca_file=ca_file, user=user, credentials=credentials)
