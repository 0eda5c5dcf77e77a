"""The signature check and the ACL decisions, pure: the official client's own signer
(rocketmq.v5.util.Signature) produces the headers."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import pytest
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.util import Signature

from rocketcluster.api.auth import AuthFileError, UserCredentials, UsersFile, WatchedFile
from rocketcluster.api.users import Action, PermissionSpec
from rocketcluster.broker.security.auth import (
    FORBIDDEN,
    UNAUTHORIZED,
    Authenticator,
    AuthError,
    Kind,
    parse_date,
    require,
    require_any,
)

SK = "s3cret-key-0123456789abcdef"


def user(name: str, admin: bool = False, **rules: list[tuple[str, list[str]]]) -> UserCredentials:
    permissions = [
        PermissionSpec.model_validate({kind: name, "actions": actions})
        for kind, entries in rules.items()
        for name, actions in entries
    ]
    return UserCredentials(
        access_key=name, secret_key=SK + name, admin=admin, permissions=permissions
    )


USERS = [
    user("producer", topic=[("orders", ["pub"])]),
    user("reader", topic=[("orders", ["sub"]), ("audit-*", ["sub"])], group=[("billing", ["sub"])]),
    user("wild", topic=[("*", ["pub", "sub"])], group=[("*", ["sub"])]),
    user("root", admin=True),
]


def signed(ak: str, sk: str) -> tuple[str, str]:
    """(authorization, x-mq-date-time) exactly as the official client sends them."""
    headers = dict(
        Signature.metadata(ClientConfiguration("127.0.0.1:8081", Credentials(ak, sk)), "c1")
    )
    return headers["authorization"], headers["x-mq-date-time"]


def client_clock() -> float:
    """The epoch seconds the client meant: 5.1.2 formats local time with a 'Z'."""
    return calendar.timegm(time.localtime())


def authenticator(clock: float | None = None, skew: int = 900) -> Authenticator:
    now = client_clock() if clock is None else clock
    return Authenticator(USERS, skew, clock=lambda: now)


def refused(code: int, authorization: str, date: str, auth: Authenticator | None = None) -> str:
    with pytest.raises(AuthError) as info:
        (auth or authenticator()).authenticate(authorization, date)
    assert info.value.code == code
    return info.value.message


def test_right_credentials_name_the_user() -> None:
    principal = authenticator().authenticate(*signed("producer", SK + "producer"))
    assert principal.access_key == "producer" and not principal.admin


def test_wrong_secret_key_unknown_access_key_and_missing_credentials() -> None:
    assert "wrong secret key" in refused(UNAUTHORIZED, *signed("producer", "not-the-key"))
    assert "unknown access key" in refused(UNAUTHORIZED, *signed("stranger", SK))
    # Credentials() is what an application without credentials passes.
    assert "no access key" in refused(UNAUTHORIZED, *signed("", ""))
    _, date = signed("producer", SK)
    assert "no authorization header" in refused(UNAUTHORIZED, "", date)
    assert "x-mq-date-time" in refused(UNAUTHORIZED, signed("producer", SK + "producer")[0], "")


@pytest.mark.parametrize(
    "header",
    [
        "Basic dXNlcjpwYXNz",
        "MQv2-HMAC-SHA1",
        "MQv2-HMAC-SHA1 Credential=producer",
        "MQv2-HMAC-SHA1 Credential=producer, SignedHeaders=x-mq-date-time",
        "MQv2-HMAC-SHA1 Credential=producer, SignedHeaders=host, Signature=00",
        "MQv2-HMAC-SHA1 Credential=producer, garbage, Signature=00",
        "MQv2-HMAC-SHA1 Credential=producer, SignedHeaders=x-mq-date-time, Signature=zz",
        "\x00" * 5000,
    ],
)
def test_malformed_headers_are_unauthorized(header: str) -> None:
    refused(UNAUTHORIZED, header, signed("producer", SK)[1])


@pytest.mark.parametrize("date", ["", "2026-11-26 07:00", "20261326T070000Z", "2026112xT070000Z"])
def test_malformed_dates_are_unauthorized(date: str) -> None:
    refused(UNAUTHORIZED, signed("producer", SK + "producer")[0], date or "x")


def test_clock_skew_window() -> None:
    authorization, date = signed("producer", SK + "producer")
    signed_at = parse_date(date)
    assert authenticator(signed_at + 899).authenticate(authorization, date)
    assert authenticator(signed_at - 899).authenticate(authorization, date)
    assert "from the broker's clock" in refused(
        UNAUTHORIZED, authorization, date, authenticator(signed_at + 901)
    )
    assert "from the broker's clock" in refused(
        UNAUTHORIZED, authorization, date, authenticator(signed_at - 60, skew=30)
    )


def test_a_verified_header_expires_from_the_cache_with_the_window() -> None:
    authorization, date = signed("producer", SK + "producer")
    now = [float(parse_date(date))]
    auth = Authenticator(USERS, 10, clock=lambda: now[0])
    first = auth.authenticate(authorization, date)
    assert auth.authenticate(authorization, date) is first  # cached
    now[0] += 11
    refused(UNAUTHORIZED, authorization, date, auth)


def test_topic_and_group_permissions() -> None:
    auth = authenticator()
    producer = auth.authenticate(*signed("producer", SK + "producer"))
    reader = auth.authenticate(*signed("reader", SK + "reader"))
    wild = auth.authenticate(*signed("wild", SK + "wild"))
    root = auth.authenticate(*signed("root", SK + "root"))
    require(producer, Kind.TOPIC, "orders", Action.PUB)
    for denied in [
        (producer, Kind.TOPIC, "orders", Action.SUB),
        (producer, Kind.TOPIC, "orders-eu", Action.PUB),
        (producer, Kind.GROUP, "billing", Action.SUB),
        (reader, Kind.TOPIC, "orders", Action.PUB),
        (reader, Kind.TOPIC, "audit", Action.SUB),  # the prefix is "audit-"
        (reader, Kind.GROUP, "billing-2", Action.SUB),
        # A group's dead letters are read as the group; written only by a topic rule.
        (reader, Kind.TOPIC, "%DLQ%billing", Action.PUB),
        (reader, Kind.TOPIC, "%DLQ%other", Action.SUB),
    ]:
        with pytest.raises(AuthError) as info:
            require(*denied)
        assert info.value.code == FORBIDDEN and denied[2] in info.value.message
    require(reader, Kind.TOPIC, "audit-2026", Action.SUB)
    require(reader, Kind.GROUP, "billing", Action.SUB)
    require(reader, Kind.TOPIC, "%DLQ%billing", Action.SUB)
    require(reader, Kind.TOPIC, "%RETRY%billing", Action.SUB)
    require(wild, Kind.TOPIC, "anything", Action.PUB)
    require(root, Kind.TOPIC, "%DLQ%billing", Action.PUB)
    require_any(producer, "orders")
    require_any(reader, "orders")
    with pytest.raises(AuthError):
        require_any(producer, "audit-1")


def test_users_file_changes_are_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    UsersFile(users=USERS[:1]).save(path)
    assert path.stat().st_mode & 0o777 == 0o600
    now = [0.0]
    watched = WatchedFile(path, UsersFile.load, 2.0, clock=lambda: now[0])
    assert [u.access_key for u in watched.get().users] == ["producer"]
    UsersFile(users=USERS).save(path)
    assert len(watched.get().users) == 1  # checked at most every 2 s
    now[0] += 2
    assert len(watched.get().users) == len(USERS)
    errors: list[AuthFileError] = []
    watched = WatchedFile(path, UsersFile.load, 2.0, clock=lambda: now[0], on_error=errors.append)
    path.write_text("{not json")
    now[0] += 2
    assert len(watched.get().users) == len(USERS) and errors  # the last good content stays
