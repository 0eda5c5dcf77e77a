"""`rocketctl controller ...` and `rocketctl elect`: the control plane's admin API."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError
from rocketcluster.api.tls import ClientTls
from rocketcluster.api.topics import MessageType
from rocketcluster.ctl.admin_token import admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError

T = TypeVar("T")


TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
# Leaders tried per command, half a second apart while none is known: a command
# given during an election waits for its outcome (an election takes about a second).
ATTEMPTS = 6
RETRY_PAUSE_S = 0.5


def admin_addresses(directory: Path, given: str | None) -> list[str]:
    if given:
        return [a.strip() for a in given.split(",") if a.strip()]
    state = _local_state(directory)
    found = state.controller_admin_addresses()
    if not found:
        raise click.ClickException(f"the cluster in {directory} has no controller")
    return found


def _local_state(directory: Path) -> LocalClusterState:
    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    if state is None:
        raise click.ClickException(
            f"give --controllers HOST:PORT,... or run `rocketctl local up --dir {directory}`"
        )
    return state


def local_tls(directory: Path) -> ClientTls | None:
    """The CA (and rocketctl's certificate) of the local cluster in ``directory``, when
    it runs TLS: its admin APIs then answer https only."""
    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    return state.client_tls() if state is not None else None


def admins(directory: Path, given: str | None, attempts: int = ATTEMPTS) -> ControllerAdmin:
    """The controllers (``--controllers``, else the local cluster's) and how to reach
    them: the local cluster's CA (https under TLS) and the admin token (security.auth:
    $ROCKETCTL_ADMIN_TOKEN, else the local cluster's)."""
    return ControllerAdmin(
        admin_addresses(directory, given),
        tls=local_tls(directory),
        token=admin_token(directory),
        timeout=TIMEOUT_S,
        probe_timeout=PROBE_TIMEOUT_S,
        attempts=attempts,
        retry_pause=RETRY_PAUSE_S,
    )


def call(directory: Path, given: str | None, act: Callable[[ControllerAdmin], T]) -> T:
    """``act`` on the controllers; a refusal or no leader as the command's error."""
    with admins(directory, given) as admin:
        try:
            return act(admin)
        except ControllerAdminError as exc:
            raise click.ClickException(str(exc)) from exc


def _options(f: Any) -> Any:
    f = click.option("--controllers", help="controller admin addresses HOST:PORT,...")(f)
    return click.option(
        "--dir", "directory", type=click.Path(path_type=Path), default=Path(".rocketcluster")
    )(f)


@click.group("controller")
def controller() -> None:
    """The controller members: status, broker groups, event history, the catalogue."""


@controller.command("status")
@_options
def status(directory: Path, controllers: str | None) -> None:
    """Each member's view: leader, term, commit index, log size."""
    with admins(directory, controllers) as admin:
        members = admin.views()
    views: list[dict[str, Any]] = [
        {"admin": m.address, "raft": m.view["raft"], "leader": m.view["leader"]}
        if m.view is not None
        else {"admin": m.address, "error": m.error}
        for m in members
    ]
    click.echo(json.dumps(views, indent=2))


@controller.command("groups")
@_options
def groups(directory: Path, controllers: str | None) -> None:
    """Broker groups: master, epochs, SyncStateSet, replicas."""
    click.echo(json.dumps(call(directory, controllers, lambda a: a.groups()), indent=2))


@controller.command("events")
@_options
@click.option("--since", type=float, default=0.0, help="seconds since the epoch")
@click.option("--group", default=None)
def events(directory: Path, controllers: str | None, since: float, group: str | None) -> None:
    """The history of every change, with time, command and reason."""
    found = call(directory, controllers, lambda a: a.events(since, group or None))
    click.echo(json.dumps(found, indent=2))


@click.command("elect")
@_options
@click.option("--group", required=True)
@click.option("--broker-id", type=int, default=None, help="designate this broker (switchover)")
def elect(directory: Path, controllers: str | None, group: str, broker_id: int | None) -> None:
    """Run an election for GROUP now (with --broker-id: make that broker master)."""
    found = call(directory, controllers, lambda a: a.elect(group, broker_id))
    click.echo(json.dumps(found, indent=2))


# -- the catalogue -------------------------------------------------------------------


def catalogue_lines(c: dict[str, Any]) -> list[str]:
    """The catalogue as a few readable lines (``--json`` prints it whole)."""
    lines = [
        f"catalogue version {c['version']}: {len(c['topics'])} topics, "
        f"{len(c['consumerGroups'])} consumer groups, {len(c['groups'])} broker groups"
    ]
    lines += [f"topic {t['name']}: {t['queues']} queues, {t['messageType']}" for t in c["topics"]]
    lines += [
        f"consumer group {g['name']}: {'FIFO' if g['fifo'] else 'concurrent'}, "
        f"up to {g['maxDeliveryAttempts']} delivery attempts"
        for g in c["consumerGroups"]
    ]
    lines += [
        f"broker group {name}: {e['endpoint'] or 'no endpoint yet'}, "
        f"{'writable' if e['writable'] else 'read-only'}"
        for name, e in c["groups"].items()
    ]
    return lines


@controller.command("catalogue")
@_options
@click.option("--json", "as_json", is_flag=True, help="print the catalogue as JSON")
def catalogue(directory: Path, controllers: str | None, as_json: bool) -> None:
    """Topics, consumer groups and broker groups (endpoint, writable) the controllers keep."""
    found = call(directory, controllers, lambda a: a.catalogue())
    click.echo(json.dumps(found, indent=2) if as_json else "\n".join(catalogue_lines(found)))


def _write(
    directory: Path, controllers: str | None, write: Callable[[ControllerAdmin], dict[str, Any]]
) -> None:
    """One write on the leader, its outcome in one line."""
    answer = call(directory, controllers, write)
    version = answer.get("version")
    click.echo(answer["message"] + ("" if version is None else f" (catalogue version {version})"))


@controller.group("topic")
def topic() -> None:
    """Topics in the catalogue (put replaces: options left out take their defaults)."""


@topic.command("put")
@_options
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option(
    "--type",
    "message_type",
    type=click.Choice([t.value for t in MessageType], case_sensitive=False),
    default=MessageType.NORMAL.value,
    show_default=True,
)
def topic_put(
    directory: Path, controllers: str | None, name: str, queues: int, message_type: str
) -> None:
    """Create or change topic NAME."""
    body = {"name": name, "queues": queues, "messageType": message_type.upper()}
    _write(directory, controllers, lambda a: a.put("topics", name, body))


@topic.command("delete")
@_options
@click.argument("name")
def topic_delete(directory: Path, controllers: str | None, name: str) -> None:
    """Delete topic NAME from the catalogue."""
    _write(directory, controllers, lambda a: a.delete("topics", name))


@controller.group("consumer-group")
def consumer_group() -> None:
    """Consumer groups in the catalogue (put replaces: options left out take their defaults)."""


@consumer_group.command("put")
@_options
@click.argument("name")
@click.option("--fifo", is_flag=True, help="deliver each message group in order")
@click.option("--max-attempts", type=click.IntRange(1, 1000), default=16, show_default=True)
def consumer_group_put(
    directory: Path, controllers: str | None, name: str, fifo: bool, max_attempts: int
) -> None:
    """Create or change consumer group NAME."""
    body = {"name": name, "fifo": fifo, "maxDeliveryAttempts": max_attempts}
    _write(directory, controllers, lambda a: a.put("consumer-groups", name, body))


@consumer_group.command("delete")
@_options
@click.argument("name")
def consumer_group_delete(directory: Path, controllers: str | None, name: str) -> None:
    """Delete consumer group NAME from the catalogue."""
    _write(directory, controllers, lambda a: a.delete("consumer-groups", name))


@controller.group("group")
def broker_group() -> None:
    """One broker group's catalogue entry."""


@broker_group.command("writable")
@_options
@click.argument("group")
@click.argument("writable", type=click.BOOL)
def group_writable(directory: Path, controllers: str | None, group: str, writable: bool) -> None:
    """Make GROUP writable (true) or read-only (false, before draining it)."""
    _write(directory, controllers, lambda a: a.set_writable(group, writable))


COMMANDS = [controller, elect]
