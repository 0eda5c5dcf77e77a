"""Who is looking, and what they may see and do.

With ``auth.enabled`` a person signs in with the admin token (an administrator) or a
user's access key and secret key (that user's ACL, from the same users file the
brokers read, re-read when it changes). The session is a signed, expiring cookie
(HttpOnly, SameSite=Strict) naming the user and carrying the CSRF token every form
posts back. Each request looks the user up again, so a user removed from the file or
whose permissions changed is treated accordingly at once. Without auth everyone is an
administrator, as the admin APIs are open then too; the cookie still carries the
CSRF token.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeSerializer, URLSafeTimedSerializer

from rocketcluster.api.acl import Kind, Principal
from rocketcluster.api.auth import UserCredentials, UsersFile, WatchedFile, read_token
from rocketcluster.api.console_config import ConsoleAuth
from rocketcluster.api.names import SYSTEM_TOPIC_PREFIX
from rocketcluster.api.users import Action

log = logging.getLogger(__name__)
COOKIE = "rc_console"
# The session of whoever signed in with the admin token; not a valid access key, so
# no user of the users file can be taken for it.
ADMIN_SESSION = "*admin-token"
ADMIN_NAME = "admin (token)"


@dataclass(frozen=True)
class Session:
    user: str
    csrf: str
    issued: float


@dataclass(frozen=True)
class Viewer:
    """The signed-in person: ``principal`` decides topics and groups."""

    name: str
    principal: Principal
    csrf: str

    @property
    def admin(self) -> bool:
        return self.principal.admin

    def may_read_topic(self, topic: str) -> bool:
        """Reading a topic's messages is consuming them: ``sub`` on it (system topics:
        administrators only)."""
        if topic.startswith(SYSTEM_TOPIC_PREFIX):
            return self.admin
        return self.principal.may(Kind.TOPIC, topic, Action.SUB)

    def may_see_topic(self, topic: str) -> bool:
        return self.may_read_topic(topic) or self.principal.may(Kind.TOPIC, topic, Action.PUB)

    def may_see_group(self, group: str) -> bool:
        return self.principal.may(Kind.GROUP, group, Action.SUB)

    def may_operate_group(self, group: str, topics: list[str]) -> bool:
        """Reset a group's offsets, resend its dead letters: ``sub`` on the group and on
        every topic it consumes here."""
        return self.may_see_group(group) and all(self.may_read_topic(t) for t in topics)


class SignInError(Exception):
    pass


class Access:
    def __init__(self, auth: ConsoleAuth) -> None:
        self.enabled = auth.enabled
        self.seconds = auth.session_seconds
        if auth.session_key_file is not None:
            key = read_token(auth.session_key_file)
        else:
            key = secrets.token_urlsafe(32)
        self._serializer = URLSafeTimedSerializer(key, salt="rocketcluster-console")
        # Messages shown once after an action (web.flash): signed with the same key, so
        # the replica that shows one need not be the one that set it.
        self.flash_signer = URLSafeSerializer(key, salt="rocketcluster-console-flash")
        self._token: WatchedFile[str] | None = None
        self._users: WatchedFile[UsersFile] | None = None
        if auth.enabled:
            if auth.admin_token_file is None:
                raise ValueError("auth.enabled needs auth.adminTokenFile")
            self._token = WatchedFile(auth.admin_token_file, read_token, 2.0, on_error=_warn)
            if auth.users_file is not None:
                self._users = WatchedFile(auth.users_file, _load_users, 2.0, on_error=_warn)

    def admin_token(self) -> str | None:
        return self._token.get() if self._token else None

    def new_session(self, user: str) -> str:
        return self._serializer.dumps({"u": user, "c": secrets.token_urlsafe(24), "t": time.time()})

    def session(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        try:
            data = self._serializer.loads(cookie, max_age=self.seconds)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not {"u", "c", "t"} <= data.keys():
            return None
        return Session(str(data["u"]), str(data["c"]), float(data["t"]))

    def viewer(self, session: Session | None) -> Viewer | None:
        """The person behind a valid session (None: sign in again)."""
        if session is None:
            return None
        if not self.enabled or session.user == ADMIN_SESSION:
            return Viewer(ADMIN_NAME, Principal.of(ADMIN_NAME, True, []), session.csrf)
        user = self._user(session.user)
        if user is None:
            return None
        return Viewer(
            user.access_key,
            Principal.of(user.access_key, user.admin, user.permissions),
            session.csrf,
        )

    def _user(self, access_key: str) -> UserCredentials | None:
        if self._users is None:
            return None
        return next((u for u in self._users.get().users if u.access_key == access_key), None)

    def sign_in(self, token: str, access_key: str, secret_key: str) -> str:
        """The user name a sign-in proves; SignInError saying what is wrong."""
        if not self.enabled:
            return ADMIN_SESSION
        if token:
            expected = self.admin_token() or ""
            if expected and hmac.compare_digest(token.strip().encode(), expected.encode()):
                return ADMIN_SESSION
            raise SignInError("that is not the cluster's admin token")
        if not access_key or not secret_key:
            raise SignInError("give the admin token, or an access key and its secret key")
        user = self._user(access_key.strip())
        if user is None or not hmac.compare_digest(
            secret_key.strip().encode(), user.secret_key.encode()
        ):
            raise SignInError("unknown access key or wrong secret key")
        return user.access_key

    def csrf_ok(self, viewer: Viewer, presented: str | None) -> bool:
        if not presented:
            return False
        return hmac.compare_digest(presented.encode(), viewer.csrf.encode())


def _load_users(path: Path) -> UsersFile:
    return UsersFile.load(path)


def _warn(exc: Exception) -> None:
    log.warning("keeping the previous credentials file: %s", exc)
