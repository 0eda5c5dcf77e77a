"""`rocketctl controller ...` and `rocketctl elect`: the control plane's admin API."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
import httpx

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


def call(addresses: list[str], method: str, path: str, **kwargs: Any) -> Any:
    """Ask members in turn; follow a 421 (not the leader) to the leader's admin API."""
    errors = []
    queue = list(addresses)
    with httpx.Client(timeout=10.0) as http:
        for _ in range(len(addresses) + 3):
            if not queue:
                break
            address = queue.pop(0)
            try:
                answer = http.request(method, f"http://{address}{path}", **kwargs)
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
                    f"{method} {path} on {address}: {answer.status_code} {answer.text}"
                )
            return answer.json()
    raise click.ClickException(f"no controller answered: {'; '.join(errors) or 'no leader'}")


def _options(f: Any) -> Any:
    f = click.option("--controllers", help="controller admin addresses HOST:PORT,...")(f)
    return click.option(
        "--dir", "directory", type=click.Path(path_type=Path), default=Path(".rocketcluster")
    )(f)


@click.group("controller")
def controller() -> None:
    """The controller members: status, broker groups, event history."""


@controller.command("status")
@_options
def status(directory: Path, controllers: str | None) -> None:
    """Each member's view: leader, term, commit index, log size."""
    views = []
    for address in admin_addresses(directory, controllers):
        try:
            view = call([address], "GET", "/v1/cluster")
            views.append({"admin": address, "raft": view["raft"], "leader": view["leader"]})
        except click.ClickException as exc:
            views.append({"admin": address, "error": exc.message})
    click.echo(json.dumps(views, indent=2))


@controller.command("groups")
@_options
def groups(directory: Path, controllers: str | None) -> None:
    """Broker groups: master, epochs, SyncStateSet, replicas."""
    click.echo(
        json.dumps(call(admin_addresses(directory, controllers), "GET", "/v1/groups"), indent=2)
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
            call(admin_addresses(directory, controllers), "GET", "/v1/events", params=params),
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
                admin_addresses(directory, controllers),
                "POST",
                f"/v1/groups/{group}/elect",
                json=body,
            ),
            indent=2,
        )
    )


COMMANDS = [controller, elect]
