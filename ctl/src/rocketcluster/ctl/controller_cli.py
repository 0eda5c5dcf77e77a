"""`rocketctl controller ...` and `rocketctl elect`: the control plane's admin API."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx

from rocketcluster.api.tls import ClientTls, admin_scheme, http_verify
from rocketcluster.api.topics import MessageType
from rocketcluster.ctl.admin_token import bearer
from rocketcluster.ctl.local.runtime import LocalRuntime


def admin_addresses(directory: Path, given: str | None) -> list[str]:
    if given:
        return [a.strip() for a in given.split(",") if a.strip()]
    state = LocalRuntime(directory).state()
    if state is None:
        raise click.ClickException(
            f"give --controllers HOST:PORT,... or run `rocketctl local up --dir {directory}`"
        )
    found = [p["addresses"]["admin"] for p in state["processes"] if p["role"] == "controller"]
    if not found:
        raise click.ClickException(f"the cluster in {directory} has no controller")
    return found


def local_tls(directory: Path) -> ClientTls | None:
    """The CA (and rocketctl's certificate) of the local cluster in ``directory``, when
    it runs TLS: its admin APIs then answer https only."""
    return LocalRuntime(directory).client_tls()


@dataclass(frozen=True)
class Admins:
    """The controllers' admin addresses and how to reach them: the local cluster's CA
    (https under TLS) and its admin token (security.auth)."""

    addresses: list[str]
    tls: ClientTls | None
    headers: dict[str, str]


def admins(directory: Path, given: str | None) -> Admins:
    return Admins(admin_addresses(directory, given), local_tls(directory), bearer(directory))


def call(target: Admins, method: str, path: str, **kwargs: Any) -> Any:
    """Ask members in turn; follow a 421 (not the leader) to the leader's admin API."""
    errors = []
    queue = list(target.addresses)
    scheme = admin_scheme(target.tls)
    with httpx.Client(timeout=10.0, verify=http_verify(target.tls), headers=target.headers) as http:
        for _ in range(len(target.addresses) + 3):
            if not queue:
                break
            address = queue.pop(0)
            try:
                answer = http.request(method, f"{scheme}://{address}{path}", **kwargs)
            except httpx.HTTPError as exc:
                errors.append(f"{address}: {exc}")
                continue
            if answer.status_code == 421:
                leader = answer.json().get("detail", {}).get("leaderAdmin")
                if leader:
                    queue.insert(0, leader)
                else:
                    time.sleep(0.5)
                    queue.append(address)
                continue
            if answer.status_code >= 400:
                raise click.ClickException(
                    f"{method} {path} on {address}: {answer.status_code} {_detail(answer)}"
                )
            return answer.json()
    raise click.ClickException(f"no controller answered: {'; '.join(errors) or 'no leader'}")


def _detail(answer: httpx.Response) -> str:
    """A refusal's own message when it is one line (FastAPI's ``detail``), else the body."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) else answer.text


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
    views = []
    target = admins(directory, controllers)
    for address in target.addresses:
        try:
            view = call(replace(target, addresses=[address]), "GET", "/v1/cluster")
            views.append({"admin": address, "raft": view["raft"], "leader": view["leader"]})
        except click.ClickException as exc:
            views.append({"admin": address, "error": exc.message})
    click.echo(json.dumps(views, indent=2))


@controller.command("groups")
@_options
def groups(directory: Path, controllers: str | None) -> None:
    """Broker groups: master, epochs, SyncStateSet, replicas."""
    click.echo(
        json.dumps(
            call(admins(directory, controllers), "GET", "/v1/groups"),
            indent=2,
        )
    )


@controller.command("events")
@_options
@click.option("--since", type=float, default=0.0, help="seconds since the epoch")
@click.option("--group", default=None)
def events(directory: Path, controllers: str | None, since: float, group: str | None) -> None:
    """The history of every change, with time, command and reason."""
    params: dict[str, Any] = {"since": since}
    if group:
        params["group"] = group
    click.echo(
        json.dumps(
            call(admins(directory, controllers), "GET", "/v1/events", params=params),
            indent=2,
        )
    )


@click.command("elect")
@_options
@click.option("--group", required=True)
@click.option("--broker-id", type=int, default=None, help="designate this broker (switchover)")
def elect(directory: Path, controllers: str | None, group: str, broker_id: int | None) -> None:
    """Run an election for GROUP now (with --broker-id: make that broker master)."""
    body = {} if broker_id is None else {"brokerId": broker_id}
    click.echo(
        json.dumps(
            call(
                admins(directory, controllers),
                "POST",
                f"/v1/groups/{quote(group, safe='')}/elect",
                json=body,
            ),
            indent=2,
        )
    )


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
    found = call(admins(directory, controllers), "GET", "/v1/catalogue")
    click.echo(json.dumps(found, indent=2) if as_json else "\n".join(catalogue_lines(found)))


def _write(directory: Path, controllers: str | None, method: str, path: str, body: Any) -> None:
    """One write on the leader, its outcome in one line."""
    answer = call(admins(directory, controllers), method, path, json=body)
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
    _write(directory, controllers, "PUT", f"/v1/topics/{quote(name, safe='')}", body)


@topic.command("delete")
@_options
@click.argument("name")
def topic_delete(directory: Path, controllers: str | None, name: str) -> None:
    """Delete topic NAME from the catalogue."""
    _write(directory, controllers, "DELETE", f"/v1/topics/{quote(name, safe='')}", None)


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
    _write(directory, controllers, "PUT", f"/v1/consumer-groups/{quote(name, safe='')}", body)


@consumer_group.command("delete")
@_options
@click.argument("name")
def consumer_group_delete(directory: Path, controllers: str | None, name: str) -> None:
    """Delete consumer group NAME from the catalogue."""
    _write(directory, controllers, "DELETE", f"/v1/consumer-groups/{quote(name, safe='')}", None)


@controller.group("group")
def broker_group() -> None:
    """One broker group's catalogue entry."""


@broker_group.command("writable")
@_options
@click.argument("group")
@click.argument("writable", type=click.BOOL)
def group_writable(directory: Path, controllers: str | None, group: str, writable: bool) -> None:
    """Make GROUP writable (true) or read-only (false, before draining it)."""
    path = f"/v1/groups/{quote(group, safe='')}/writable"
    _write(directory, controllers, "PUT", path, {"writable": writable})


COMMANDS = [controller, elect]
