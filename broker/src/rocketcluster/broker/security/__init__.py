"""Authentication and authorization of the client port (``security.auth``)."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc

from rocketcluster.api.auth import AuthProcessConfig, UsersFile, WatchedFile
from rocketcluster.broker.security.auth import Authenticator
from rocketcluster.broker.security.interceptor import AuthInterceptor, Observe

log = logging.getLogger(__name__)

__all__ = ["AuthInterceptor", "Authenticator", "client_interceptors", "users_source"]


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


def client_interceptors(
    auth: AuthProcessConfig, observe: Observe | None = None
) -> list[grpc.aio.ServerInterceptor]:
    """What the client port's gRPC server runs before the messaging service: nothing
    when auth is off (the plain path pays nothing)."""
    if not auth.enabled:
        return []
    return [AuthInterceptor(users_source(auth).get, observe)]
