"""What a broker or controller process reads for authentication: the ``auth`` field of
its process config, which only *points at* files (the users file and the admin token
file) — secrets never travel inline in a rendered ConfigMap or config file.

In Kubernetes the operator keeps both files in Secrets mounted into the pods (a
mounted Secret is updated in place, so brokers pick up a new user or a rotated key by
polling the file); ``rocketctl local up`` writes them (mode 0600) under the cluster's
directory.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from rocketcluster.api.users import USER_NAME_PATTERN, PermissionSpec, UserSpec

# What the official clients put in the ``authorization`` header (RocketMQ ACL 2.0).
SIGNATURE_ALGORITHM: Final = "MQv2-HMAC-SHA1"
# Keys of a user's Secret (Strimzi's KafkaUser keeps ``password``; RocketMQ speaks of
# access key and secret key).
ACCESS_KEY: Final = "accessKey"
SECRET_KEY: Final = "secretKey"
# Key of the admin token Secret, and of the users Secret (the users file).
ADMIN_TOKEN_KEY: Final = "token"
USERS_FILE_KEY: Final = "users.json"
SECRET_KEY_BYTES: Final = 32
# Where tools that read a cluster (the Spark jobs) find the admin token.
ADMIN_TOKEN_ENV: Final = "ROCKETCLUSTER_ADMIN_TOKEN"

T = TypeVar("T")


class AuthFileError(ValueError):
    """A users file or token file that cannot be used; says which file and why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class AuthProcessConfig(BaseModel):
    """``auth`` of a broker's or controller's process config."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    enabled: bool = False
    # {"users": [{accessKey, secretKey, admin, permissions}]} (UsersFile); brokers only.
    users_file: Path | None = None
    # One line: the token the admin API and /metrics require (``Authorization: Bearer``).
    admin_token_file: Path | None = None
    clock_skew_seconds: int = Field(default=900, ge=1, le=86_400)
    # How often the users file is checked for a change (mtime, inode, size).
    reload_seconds: float = Field(default=2.0, gt=0, le=300)

    @model_validator(mode="after")
    def _files_when_enabled(self) -> AuthProcessConfig:
        if self.enabled and self.admin_token_file is None:
            raise ValueError("auth.enabled needs auth.adminTokenFile")
        return self


class UserCredentials(BaseModel):
    """One user of the users file: the access key (the user's name), its secret key
    and what it may do."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    access_key: str = Field(pattern=USER_NAME_PATTERN)
    secret_key: str = Field(min_length=16, max_length=256)
    admin: bool = False
    permissions: list[PermissionSpec] = Field(default_factory=list)

    @classmethod
    def of(cls, user: UserSpec, secret_key: str) -> UserCredentials:
        return cls(
            access_key=user.name,
            secret_key=secret_key,
            admin=user.admin,
            permissions=list(user.permissions),
        )

    def spec(self) -> UserSpec:
        return UserSpec(name=self.access_key, admin=self.admin, permissions=self.permissions)


class UsersFile(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    users: list[UserCredentials] = Field(default_factory=list)
    # Local mode: the users that came from the manifest's spec.users (a user that
    # leaves the manifest leaves the file; users made with rocketctl stay).
    manifest_users: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> UsersFile:
        seen: set[str] = set()
        for user in self.users:
            if user.access_key in seen:
                raise ValueError(f"user {user.access_key!r} appears twice")
            seen.add(user.access_key)
        return self

    def find(self, name: str) -> UserCredentials | None:
        return next((u for u in self.users if u.access_key == name), None)

    def dumps(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def loads(cls, text: str | bytes, path: Path = Path("<users>")) -> UsersFile:
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:
            raise AuthFileError(path, f"not a valid users file: {exc}") from exc

    @classmethod
    def load(cls, path: Path) -> UsersFile:
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise AuthFileError(path, f"cannot read the users file: {exc}") from exc
        return cls.loads(text, path)

    def save(self, path: Path) -> None:
        write_private(path, self.dumps())


def generate_secret_key() -> str:
    """A new secret key: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(SECRET_KEY_BYTES)


def generate_admin_token() -> str:
    return secrets.token_urlsafe(SECRET_KEY_BYTES)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, atomically (a broker polling the file
    never reads half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def read_token(path: Path) -> str:
    """The admin token in ``path`` (surrounding whitespace stripped)."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise AuthFileError(path, f"cannot read the admin token: {exc}") from exc
    if not token:
        raise AuthFileError(path, "the admin token file is empty")
    return token


class WatchedFile(Generic[T]):
    """A file's parsed content, re-read when the file changes (mtime, inode or size),
    checked at most every ``interval`` seconds and only when asked — no task to run.
    A mounted Secret is replaced in place (a symlink swap); ``stat`` follows it.

    The first load raises (a process must not start on a broken file); a later
    change that fails to parse keeps the last good content and reports the error
    through ``on_error`` once per change."""

    def __init__(
        self,
        path: Path,
        parse: Callable[[Path], T],
        interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[AuthFileError], None] | None = None,
    ) -> None:
        self.path = path
        self._parse = parse
        self._interval = interval
        self._clock = clock
        self._on_error = on_error
        self._stamp = self._stat()
        self._value = parse(path)
        self._checked = clock()
        self.reloads = 0

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def get(self) -> T:
        now = self._clock()
        if now - self._checked >= self._interval:
            self._checked = now
            self.refresh()
        return self._value

    def refresh(self) -> bool:
        """Re-read the file now if it changed; True when new content was taken."""
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self._value = self._parse(self.path)
        except AuthFileError as exc:
            if self._on_error is not None:
                self._on_error(exc)
            return False
        self.reloads += 1
        return True
