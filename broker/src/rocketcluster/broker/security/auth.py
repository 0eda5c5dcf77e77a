"""AK/SK signature verification and ACL decisions, pure (no gRPC, no files, the clock
passed in): what a request's ``authorization`` and ``x-mq-date-time`` headers prove,
and whether the user they name may do an action on a topic or consumer group.

The official clients sign ``x-mq-date-time`` (``%Y%m%dT%H%M%SZ``) with
HMAC-SHA1(secret key), hex-encoded, and send
``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``
(rocketmq/v5/util/signature.py). A client signs a new date once a second, so the
same (header, date) pair repeats for every request of that second: verification is
cached per pair and the cache costs one dict lookup and one clock comparison per
request (DESIGN §9). The Python client 5.1.2 formats its *local* time with a ``Z``
suffix; the date is read as UTC, so such a client must run in UTC (as pods do) or
within the clock-skew window of it.

Resources and actions (RocketMQ ACL 2.0's shape) are decided by
``rocketcluster.api.acl`` (shared with the console); sending into a group's
``%RETRY%``/``%DLQ%`` topics needs a topic rule, which in practice means an admin.
"""

from __future__ import annotations

import calendar
import hmac
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import sha1
from typing import Final

from rocketcluster.api.acl import Kind, Principal
from rocketcluster.api.auth import SIGNATURE_ALGORITHM, UserCredentials
from rocketcluster.api.users import Action

__all__ = ["AuthError", "Authenticator", "Kind", "Principal", "require", "require_any", "sign"]

UNAUTHORIZED: Final = 40100
FORBIDDEN: Final = 40300
SIGNED_HEADER: Final = "x-mq-date-time"
# Verified (header, date) pairs kept; a client signs one pair per second, so this
# covers thousands of active clients within one clock-skew window.
VERIFIED_CACHE_MAX: Final = 8192


class AuthError(Exception):
    """A refused request: ``code`` is the protocol status (40100 UNAUTHORIZED or 40300
    FORBIDDEN) the client gets, ``message`` says why and what to do."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def unauthorized(message: str) -> AuthError:
    return AuthError(UNAUTHORIZED, message)


@dataclass(frozen=True, slots=True)
class Credential:
    """The parts of an ``authorization`` header."""

    access_key: str
    signed_headers: str
    signature: str


def parse_authorization(header: str) -> Credential:
    """Split ``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=<h>, Signature=<hex>``."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != SIGNATURE_ALGORITHM:
        raise unauthorized(
            f"authorization must use {SIGNATURE_ALGORITHM} (got {algorithm[:40]!r}): "
            "configure the client with Credentials(access_key, secret_key)"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq:
            raise unauthorized(f"malformed authorization header: {part.strip()[:40]!r}")
        fields[key] = value
    try:
        credential = Credential(
            fields["Credential"], fields["SignedHeaders"], fields["Signature"].lower()
        )
    except KeyError as exc:
        raise unauthorized(f"authorization header lacks {exc.args[0]}") from None
    if not credential.access_key:
        raise unauthorized("no access key: configure the client with Credentials(ak, sk)")
    if credential.signed_headers != SIGNED_HEADER:
        raise unauthorized(f"SignedHeaders must be {SIGNED_HEADER}")
    return credential


def parse_date(text: str) -> int:
    """Epoch seconds of an ``x-mq-date-time`` value (``20261126T070102Z``, UTC)."""
    if len(text) != 16 or text[8] != "T" or text[15] != "Z":
        raise unauthorized(f"x-mq-date-time {text[:40]!r} is not yyyyMMddTHHmmssZ")
    try:
        parts = (
            int(text[0:4]),
            int(text[4:6]),
            int(text[6:8]),
            int(text[9:11]),
            int(text[11:13]),
            int(text[13:15]),
        )
    except ValueError:
        raise unauthorized(f"x-mq-date-time {text!r} is not yyyyMMddTHHmmssZ") from None
    year, month, day, hour, minute, second = parts
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        raise unauthorized(f"x-mq-date-time {text!r} is not a date")
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))


def sign(secret_key: str, date: str) -> str:
    return hmac.new(secret_key.encode(), date.encode(), sha1).hexdigest()


class Authenticator:
    """Verifies signatures against one version of the users file (a reload builds a
    new one: nothing here is ever mutated from outside)."""

    def __init__(
        self,
        users: Iterable[UserCredentials],
        clock_skew_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secrets = {u.access_key: u.secret_key for u in users}
        self._principals = {
            u.access_key: Principal.of(u.access_key, u.admin, u.permissions) for u in users
        }
        self._skew = clock_skew_seconds
        self._clock = clock
        self._verified: dict[tuple[str, str], tuple[Principal, int]] = {}

    @property
    def users(self) -> int:
        return len(self._secrets)

    def authenticate(self, authorization: str, date: str) -> Principal:
        """The user that signed ``date`` in ``authorization``; AuthError(40100) when the
        header is missing or malformed, the access key unknown, the signature wrong or
        the date outside the clock-skew window."""
        cached = self._verified.get((authorization, date))
        if cached is not None:
            principal, signed_at = cached
            if abs(self._clock() - signed_at) <= self._skew:
                return principal
            del self._verified[(authorization, date)]
        if not authorization:
            raise unauthorized(
                "no authorization header: this cluster requires credentials; configure "
                "the client with Credentials(access_key, secret_key)"
            )
        if not date:
            raise unauthorized("no x-mq-date-time header: the signature has nothing to sign")
        credential = parse_authorization(authorization)
        signed_at = parse_date(date)
        secret = self._secrets.get(credential.access_key)
        if secret is None:
            raise unauthorized(f"unknown access key {credential.access_key[:64]!r}")
        skew = self._clock() - signed_at
        if abs(skew) > self._skew:
            raise unauthorized(
                f"x-mq-date-time {date} is {skew:+.0f}s from the broker's clock (at most "
                f"{self._skew}s allowed): sync the client's clock (UTC)"
            )
        if not hmac.compare_digest(sign(secret, date), credential.signature):
            raise unauthorized(
                f"signature mismatch for access key {credential.access_key!r}: wrong secret key"
            )
        principal = self._principals[credential.access_key]
        if len(self._verified) >= VERIFIED_CACHE_MAX:
            self._verified.clear()
        self._verified[(authorization, date)] = (principal, signed_at)
        return principal


def require(principal: Principal, kind: Kind, name: str, action: Action) -> None:
    """AuthError(40300) unless ``principal`` may ``action`` on the resource."""
    if not principal.may(kind, name, action):
        raise AuthError(
            FORBIDDEN,
            f"user {principal.access_key!r} has no {action.value} permission on "
            f"{kind.value} {name!r}: grant it in the user's permissions",
        )


def require_any(principal: Principal, name: str) -> None:
    """Topic routes: either ``pub`` or ``sub`` on the topic will do."""
    if not (
        principal.may(Kind.TOPIC, name, Action.PUB) or principal.may(Kind.TOPIC, name, Action.SUB)
    ):
        raise AuthError(
            FORBIDDEN,
            f"user {principal.access_key!r} has neither pub nor sub permission on topic "
            f"{name!r}: grant one in the user's permissions",
        )
