"""Sign-in, sessions and ACL decisions of the console, and its config file: pure, no
cluster (the browser tests drive the same code against a live one)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rocketcluster.api.auth import UserCredentials, UsersFile, write_private
from rocketcluster.api.console_config import ConsoleAuth
from rocketcluster.api.users import Action, PermissionSpec
from rocketcluster.console.access import ADMIN_SESSION, Access, SignInError
from rocketcluster.console.main import ConfigError, load_config, split_listen


def _auth(tmp_path: Path, seconds: int = 3600) -> ConsoleAuth:
    token = tmp_path / "admin-token"
    write_private(token, "t0ken-of-the-admin")
    users = UsersFile(
        users=[
            UserCredentials(
                access_key="app",
                secret_key="s" * 20,
                permissions=[
                    PermissionSpec(topic="orders", actions=[Action.SUB]),
                    PermissionSpec(group="billing", actions=[Action.SUB]),
                ],
            )
        ]
    )
    users_file = tmp_path / "users.json"
    write_private(users_file, users.model_dump_json(by_alias=True))
    return ConsoleAuth(
        enabled=True, admin_token_file=token, users_file=users_file, session_seconds=seconds
    )


def test_sign_in_with_the_token_or_keys(tmp_path: Path) -> None:
    access = Access(_auth(tmp_path))
    assert access.sign_in("t0ken-of-the-admin", "", "") == ADMIN_SESSION
    assert access.sign_in("", "app", "s" * 20) == "app"
    for token, ak, sk in [("wrong", "", ""), ("", "app", "x" * 20), ("", "nobody", "s" * 20)]:
        with pytest.raises(SignInError):
            access.sign_in(token, ak, sk)
    with pytest.raises(SignInError, match="give the admin token"):
        access.sign_in("", "", "")


def test_a_user_sees_and_acts_on_what_its_acl_allows(tmp_path: Path) -> None:
    access = Access(_auth(tmp_path))
    viewer = access.viewer(access.session(access.new_session("app")))
    assert viewer is not None and not viewer.admin
    assert viewer.may_read_topic("orders") and not viewer.may_read_topic("payments")
    assert viewer.may_see_group("billing") and not viewer.may_see_group("audit")
    assert viewer.may_operate_group("billing", ["orders"])
    assert not viewer.may_operate_group("billing", ["orders", "payments"])
    assert not viewer.may_read_topic("RMQ_SYS_TRACE_DATA")
    admin = access.viewer(access.session(access.new_session(ADMIN_SESSION)))
    assert admin is not None and admin.admin and admin.may_read_topic("RMQ_SYS_TRACE_DATA")


def test_sessions_are_signed_expire_and_follow_the_users_file(tmp_path: Path) -> None:
    auth = _auth(tmp_path, seconds=60)
    access = Access(auth)
    cookie = access.new_session("app")
    assert access.session(cookie) is not None
    assert access.session(cookie[:-2] + "xx") is None  # tampered
    assert Access(auth).session(cookie) is None  # another process's random key
    # Expiry: the signature's timestamp is checked against sessionSeconds.
    session = access.session(cookie)
    assert session is not None and abs(session.issued - time.time()) < 5
    access.seconds = 0
    time.sleep(1.1)
    assert access.session(cookie) is None
    # A user removed from the file is signed out at the next request.
    access = Access(auth)
    session = access.session(access.new_session("app"))
    assert access.viewer(session) is not None
    assert auth.users_file is not None
    write_private(auth.users_file, json.dumps({"users": []}))
    access._users._checked = 0.0  # type: ignore[union-attr]  # re-read now, not in 2 s
    assert access.viewer(session) is None


def test_csrf_token_belongs_to_the_session(tmp_path: Path) -> None:
    access = Access(_auth(tmp_path))
    viewer = access.viewer(access.session(access.new_session("app")))
    other = access.viewer(access.session(access.new_session("app")))
    assert viewer is not None and other is not None
    assert access.csrf_ok(viewer, viewer.csrf)
    assert not access.csrf_ok(viewer, other.csrf)
    assert not access.csrf_ok(viewer, None) and not access.csrf_ok(viewer, "")


def test_without_auth_everyone_is_an_administrator() -> None:
    access = Access(ConsoleAuth())
    viewer = access.viewer(access.session(access.new_session(ADMIN_SESSION)))
    assert viewer is not None and viewer.admin
    assert access.sign_in("", "", "") == ADMIN_SESSION


def test_config_file_errors_name_the_file_and_field(tmp_path: Path) -> None:
    good = tmp_path / "console.yaml"
    good.write_text("cluster: prod\ncontrollers: [http://c-0:8080]\n")
    assert load_config(good).cluster == "prod"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cluster": "prod", "controllers": ["c-0:8080"]}))
    with pytest.raises(ConfigError, match=r"bad.json: controllers"):
        load_config(bad)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="adminTokenFile"):
        Access(ConsoleAuth(enabled=True))
    assert split_listen("0.0.0.0:8090") == ("0.0.0.0", 8090)
    with pytest.raises(ConfigError):
        split_listen("8090")
