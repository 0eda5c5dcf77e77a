"""`rocketctl user ...` on a local cluster's users file, and `--kube` manifests that
validate as RocketUser resources."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.user_resource import RocketUser
from rocketcluster.ctl.cli import main
from rocketcluster.ctl.local.auth import admin_token_path, prepare_local_auth, users_path


def cluster(users: list[dict[str, object]]) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "c"},
            "spec": {"security": {"auth": {"enabled": True}}, "users": users},
        }
    )


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_local_up_keeps_keys_and_users_added_by_hand(tmp_path: Path) -> None:
    auth = prepare_local_auth(cluster([{"name": "app", "admin": True}]), tmp_path)
    assert auth is not None and auth.users_file == users_path(tmp_path)
    assert admin_token_path(tmp_path).stat().st_mode & 0o777 == 0o600
    first = UsersFile.load(users_path(tmp_path)).find("app")
    assert first is not None and len(first.secret_key) >= 43
    run("user", "create", "extra", "--topic", "t", "--dir", str(tmp_path))
    prepare_local_auth(cluster([{"name": "app"}]), tmp_path)  # `local up` again
    users = UsersFile.load(users_path(tmp_path))
    again = users.find("app")
    assert again is not None and again.secret_key == first.secret_key and not again.admin
    assert users.find("extra") is not None
    prepare_local_auth(cluster([{"name": "other"}]), tmp_path)  # "app" left the manifest
    names = {u.access_key for u in UsersFile.load(users_path(tmp_path)).users}
    assert names == {"other", "extra"}
    assert (
        prepare_local_auth(RocketCluster.model_validate({"metadata": {"name": "c"}}), tmp_path)
        is None
    )


def test_create_list_rotate_delete(tmp_path: Path) -> None:
    prepare_local_auth(cluster([]), tmp_path)
    d = ("--dir", str(tmp_path))
    keys = json.loads(
        run(
            "user",
            "create",
            "orders_app",
            "--topic",
            "orders:pub",
            "--topic",
            "audit-*",
            "--group",
            "billing",
            "--json",
            *d,
        )
    )
    assert keys["accessKey"] == "orders_app" and len(keys["secretKey"]) >= 43
    listed = run("user", "list", *d)
    assert "orders_app: topic orders: pub; topic audit-*: pub,sub; group billing: sub" in listed
    assert keys["secretKey"] not in listed + run("user", "list", "--json", *d)
    refused = CliRunner().invoke(main, ["user", "create", "orders_app", *d])
    assert refused.exit_code != 0 and "rotate" in refused.output
    shown = json.loads(run("user", "keys", "orders_app", "--json", *d))
    assert shown == keys
    rotated = run("user", "rotate", "orders_app", *d)
    new_key = UsersFile.load(users_path(tmp_path)).find("orders_app")
    assert new_key is not None and new_key.secret_key != keys["secretKey"]
    assert new_key.secret_key in rotated
    run("user", "delete", "orders_app", *d)
    assert UsersFile.load(users_path(tmp_path)).users == []
    bad = CliRunner().invoke(main, ["user", "create", "x", "--topic", "t:write", *d])
    assert bad.exit_code != 0


def test_kube_manifest_is_a_valid_rocket_user(tmp_path: Path) -> None:
    text = run(
        "user",
        "create",
        "Orders_App",
        "--admin",
        "--group",
        "billing",
        "--kube",
        "--cluster",
        "prod",
        "--namespace",
        "mq",
    )
    manifest = yaml.safe_load(text)
    resource = RocketUser.model_validate(manifest)
    assert resource.metadata.name == "orders-app" and resource.metadata.namespace == "mq"
    assert resource.user().name == "Orders_App" and resource.user().admin
    assert not users_path(tmp_path).exists()
    missing = CliRunner().invoke(main, ["user", "create", "x", "--kube"])
    assert missing.exit_code != 0 and "--cluster" in missing.output


def test_without_auth_the_verbs_say_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["user", "list", "--dir", str(tmp_path)])
    assert result.exit_code != 0 and "security.auth.enabled" in result.output
