"""Authentication and authorization of the client port (``security.auth``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from rocketcluster.api.auth import AuthProcessConfig, UsersFile, WatchedFile
from rocketcluster.broker.security.auth import Authenticator
from rocketcluster.broker.security.guard import CHECKS, AuthGuard, Check, Observe, Refuse

log = logging.getLogger(__name__)

__all__ = ["AuthGuard", "Authenticator", "guard_servicer", "users_source"]

T = TypeVar("T")


def users_source(auth: AuthProcessConfig) -> WatchedFile[Authenticator]:
    """The users file as an Authenticator, rebuilt whenever the file changes (a new
    user, a rotated secret key) — no restart."""
    if auth.users_file is None:
        raise ValueError("auth.enabled on a broker needs auth.usersFile")

    def build(path: Path) -> Authenticator:
        users = UsersFile.load(path)
        log.info("auth: %d users from %s", len(users.users), path)
        return Authenticator(users.users, auth.clock_skew_seconds)

    return WatchedFile(
        auth.users_file,
        build,
        auth.reload_seconds,
        on_error=lambda exc: log.warning("keeping the previous users: %s", exc),
    )


def guard_servicer(
    servicer: T,
    auth: AuthProcessConfig,
    observe: Observe | None = None,
    checks: Mapping[str, Check] = CHECKS,
    refusal: Refuse | None = None,
    users: WatchedFile[Authenticator] | None = None,
) -> T:
    """``servicer`` behind the AK/SK check and ACLs when auth is on; ``servicer``
    itself otherwise (the plain path pays nothing). ``checks``/``refusal``: another
    service's (see AuthGuard); ``users``: a users source to share between services."""
    if not auth.enabled:
        return servicer
    source = users or users_source(auth)
    return AuthGuard(servicer, source.get, observe, checks, refusal)  # type: ignore[return-value]
