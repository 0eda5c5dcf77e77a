"""`rocketctl user ...`: the users of a local cluster with security.auth on (its users
file, ``DIR/auth/users.json``, which the brokers re-read within seconds: no restart),
or, with ``--kube``, a RocketUser manifest to ``kubectl apply``.

Secret keys are printed once, by ``create`` and ``rotate``; ``list`` never shows them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from rocketcluster.api.auth import UserCredentials, UsersFile, generate_secret_key
from rocketcluster.api.users import PermissionSpec, UserSpec
from rocketcluster.ctl.local.auth import users_path


def parse_permissions(topics: tuple[str, ...], groups: tuple[str, ...]) -> list[PermissionSpec]:
    """``--topic NAME[:pub,sub]`` (both when no actions are given) and ``--group NAME``
    (sub) as permissions; a name may be a prefix ending in ``*`` or ``*``."""
    out = []
    try:
        for text in topics:
            name, _, actions = text.partition(":")
            chosen = [a.strip() for a in actions.split(",") if a.strip()] or ["pub", "sub"]
            out.append(PermissionSpec.model_validate({"topic": name, "actions": chosen}))
        for name in groups:
            out.append(PermissionSpec.model_validate({"group": name, "actions": ["sub"]}))
    except ValidationError as exc:
        raise click.BadParameter(_problems(exc)) from exc
    return out


def _problems(exc: ValidationError) -> str:
    return "; ".join(e["msg"] for e in exc.errors())


def _load(directory: Path) -> tuple[Path, UsersFile]:
    path = users_path(directory)
    if not path.exists():
        raise click.ClickException(
            f"no users file at {path}: start a cluster with security.auth.enabled "
            f"(`rocketctl local up --dir {directory}`), or use --kube for Kubernetes"
        )
    return path, UsersFile.load(path)


def _permission_text(p: PermissionSpec) -> str:
    kind, name = ("topic", p.topic) if p.topic is not None else ("group", p.group)
    return f"{kind} {name}: {','.join(a.value for a in p.actions)}"


def _show_keys(user: UserCredentials, as_json: bool, verb: str) -> None:
    if as_json:
        click.echo(json.dumps({"accessKey": user.access_key, "secretKey": user.secret_key}))
        return
    once = " (shown once)" if verb != "exists" else ""
    click.echo(f"user {user.access_key} {verb}; its keys{once}:")
    click.echo(f"  access key: {user.access_key}")
    click.echo(f"  secret key: {user.secret_key}")
    click.echo("clients: ClientConfiguration(endpoints, Credentials(access_key, secret_key))")


def _dir_option(f: Any) -> Any:
    return click.option(
        "--dir",
        "directory",
        type=click.Path(path_type=Path),
        default=Path(".rocketcluster"),
        show_default=True,
        help="local cluster directory",
    )(f)


def _json_option(f: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="print JSON")(f)


@click.group("user")
def user() -> None:
    """Users (access key, secret key, permissions) when security.auth is on."""


@user.command("create")
@click.argument("name")
@click.option("--admin", is_flag=True, help="may do everything, admin API included")
@click.option("--topic", "topics", multiple=True, help="TOPIC[:pub,sub] (repeatable)")
@click.option("--group", "groups", multiple=True, help="consumer group (sub; repeatable)")
@click.option("--kube", is_flag=True, help="print a RocketUser manifest instead")
@click.option("--cluster", default=None, help="the RocketCluster (with --kube)")
@click.option("--namespace", default="default", show_default=True, help="with --kube")
@_dir_option
@_json_option
def create(
    name: str,
    admin: bool,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    kube: bool,
    cluster: str | None,
    namespace: str,
    directory: Path,
    as_json: bool,
) -> None:
    """Create user NAME (its access key) and print its secret key once."""
    try:
        spec = UserSpec(name=name, admin=admin, permissions=parse_permissions(topics, groups))
    except ValidationError as exc:
        raise click.BadParameter(_problems(exc), param_hint="NAME") from exc
    if kube:
        if not cluster:
            raise click.UsageError("--kube needs --cluster (the RocketCluster's name)")
        click.echo(rocket_user_manifest(spec, cluster, namespace, as_json), nl=False)
        return
    path, users = _load(directory)
    if users.find(name) is not None:
        raise click.ClickException(
            f"user {name!r} exists: `rocketctl user rotate {name}` gives it a new secret key"
        )
    created = UserCredentials.of(spec, generate_secret_key())
    users.model_copy(update={"users": [*users.users, created]}).save(path)
    _show_keys(created, as_json, "created")


def rocket_user_manifest(spec: UserSpec, cluster: str, namespace: str, as_json: bool) -> str:
    """A RocketUser for ``spec`` (its name a Kubernetes name; the access key in
    ``userName`` when they differ)."""
    k8s_name = spec.name.lower().replace("_", "-")
    body: dict[str, Any] = {"cluster": cluster}
    if k8s_name != spec.name:
        body["userName"] = spec.name
    if spec.admin:
        body["admin"] = True
    body["permissions"] = [
        p.model_dump(mode="json", exclude_none=True, by_alias=True) for p in spec.permissions
    ]
    manifest = {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketUser",
        "metadata": {"name": k8s_name, "namespace": namespace},
        "spec": body,
    }
    if as_json:
        return json.dumps(manifest, indent=2) + "\n"
    return str(yaml.safe_dump(manifest, sort_keys=False))


@user.command("list")
@_dir_option
@_json_option
def list_users(directory: Path, as_json: bool) -> None:
    """Users and their permissions (never their secret keys)."""
    _, users = _load(directory)
    if as_json:
        views = [u.spec().model_dump(mode="json", exclude_none=True) for u in users.users]
        click.echo(json.dumps(views, indent=2))
        return
    for u in users.users:
        rules = "; ".join(_permission_text(p) for p in u.permissions) or "no permissions"
        if u.admin:
            rules = "everything" + (f" (and {rules})" if u.permissions else "")
        click.echo(f"{u.access_key}{' (admin)' if u.admin else ''}: {rules}")


@user.command("keys")
@click.argument("name")
@_dir_option
@_json_option
def keys(name: str, directory: Path, as_json: bool) -> None:
    """Print user NAME's access key and secret key (e.g. one of the manifest's users,
    whose keys `rocketctl local up` made)."""
    path, users = _load(directory)
    found = users.find(name)
    if found is None:
        raise click.ClickException(f"no user {name!r} in {path}")
    _show_keys(found, as_json, "exists")


@user.command("delete")
@click.argument("name")
@_dir_option
def delete(name: str, directory: Path) -> None:
    """Delete user NAME: its clients are refused within seconds."""
    path, users = _load(directory)
    if users.find(name) is None:
        raise click.ClickException(f"no user {name!r} in {path}")
    users.model_copy(update={"users": [u for u in users.users if u.access_key != name]}).save(path)
    click.echo(f"user {name} deleted")


@user.command("rotate")
@click.argument("name")
@_dir_option
@_json_option
def rotate(name: str, directory: Path, as_json: bool) -> None:
    """Give user NAME a new secret key (the old one is refused within seconds)."""
    path, users = _load(directory)
    found = users.find(name)
    if found is None:
        raise click.ClickException(f"no user {name!r} in {path}")
    rotated = found.model_copy(update={"secret_key": generate_secret_key()})
    users.model_copy(
        update={"users": [rotated if u.access_key == name else u for u in users.users]}
    ).save(path)
    _show_keys(rotated, as_json, "rotated")


COMMANDS = [user]
