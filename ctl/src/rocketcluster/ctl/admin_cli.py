"""Admin verbs against a broker's REST API: topics, groups, offsets, messages, stats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import click

from rocketcluster.api.client.admin import AdminClient, AdminError
from rocketcluster.api.tls import ClientTls
from rocketcluster.ctl.admin_token import admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalStateError

ADMIN_ENV = "ROCKETCTL_ADMIN"
C = TypeVar("C", bound=click.Command)


def local_tls(directory: Path) -> ClientTls | None:
    return LocalRuntime(directory).client_tls()


def _address(admin: str | None, directory: Path) -> str:
    if admin:
        return admin
    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    if state is None:
        raise click.ClickException(
            f"give --admin HOST:PORT (or ${ADMIN_ENV}), "
            f"or run `rocketctl local up --dir {directory}`"
        )
    brokers = state.brokers()
    if not brokers:
        raise click.ClickException(f"the cluster in {directory} has no broker")
    return brokers[0].admin


def _client(ctx: click.Context) -> AdminClient:
    obj = ctx.ensure_object(dict)
    directory = obj.get("dir", Path(".rocketcluster"))
    # A local cluster running TLS: https, trusting its CA; with auth, its admin token.
    return AdminClient(
        _address(obj.get("admin"), directory),
        tls=local_tls(directory),
        token=admin_token(directory),
    )


def _print(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def admin_options(group: C) -> C:
    group.params.extend(
        [
            click.Option(["--admin"], envvar=ADMIN_ENV, help="broker admin address HOST:PORT"),
            click.Option(
                ["--dir"],
                type=click.Path(path_type=Path),
                default=Path(".rocketcluster"),
                help="local cluster directory (used when --admin is not given)",
            ),
        ]
    )
    return group


def _run(ctx: click.Context, action: Any) -> None:
    try:
        with _client(ctx) as client:
            _print(action(client))
    except AdminError as exc:
        raise click.ClickException(str(exc)) from exc


def _remember(ctx: click.Context, admin: str | None, dir: Path) -> None:
    ctx.ensure_object(dict).update({"admin": admin, "dir": dir})


@admin_options
@click.group("topic")
@click.pass_context
def topic(ctx: click.Context, admin: str | None, dir: Path) -> None:
    """Topics: list, show, create, delete."""
    _remember(ctx, admin, dir)


@topic.command("list")
@click.pass_context
def topic_list(ctx: click.Context) -> None:
    _run(ctx, lambda c: c.topics())


@topic.command("show")
@click.argument("name")
@click.pass_context
def topic_show(ctx: click.Context, name: str) -> None:
    _run(ctx, lambda c: c.topic(name))


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=int, default=8, show_default=True)
@click.option(
    "--type",
    "message_type",
    default="NORMAL",
    show_default=True,
    type=click.Choice(["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"]),
)
@click.pass_context
def topic_create(ctx: click.Context, name: str, queues: int, message_type: str) -> None:
    _run(ctx, lambda c: c.create_topic(name, queues, message_type))


@topic.command("delete")
@click.argument("name")
@click.pass_context
def topic_delete(ctx: click.Context, name: str) -> None:
    _run(ctx, lambda c: c.delete_topic(name) or {"deleted": name})


@admin_options
@click.group("group")
@click.pass_context
def group(ctx: click.Context, admin: str | None, dir: Path) -> None:
    """Consumer groups: list, create, delete, offsets, reset."""
    _remember(ctx, admin, dir)


@group.command("list")
@click.pass_context
def group_list(ctx: click.Context) -> None:
    _run(ctx, lambda c: c.groups())


@group.command("create")
@click.argument("name")
@click.option("--fifo", is_flag=True)
@click.option("--max-delivery-attempts", type=int, default=16, show_default=True)
@click.pass_context
def group_create(ctx: click.Context, name: str, fifo: bool, max_delivery_attempts: int) -> None:
    _run(ctx, lambda c: c.create_group(name, fifo, max_delivery_attempts))


@group.command("delete")
@click.argument("name")
@click.pass_context
def group_delete(ctx: click.Context, name: str) -> None:
    _run(ctx, lambda c: c.delete_group(name) or {"deleted": name})


@group.command("offsets")
@click.argument("name")
@click.pass_context
def group_offsets(ctx: click.Context, name: str) -> None:
    _run(ctx, lambda c: c.offsets(name))


@group.command("reset")
@click.argument("name")
@click.option("--topic", "topic_name", required=True)
@click.option("--queue", "queue_id", type=int, required=True)
@click.option("--offset", type=int, required=True)
@click.pass_context
def group_reset(ctx: click.Context, name: str, topic_name: str, queue_id: int, offset: int) -> None:
    _run(ctx, lambda c: c.reset_offset(name, topic_name, queue_id, offset))


@admin_options
@click.group("message")
@click.pass_context
def message(ctx: click.Context, admin: str | None, dir: Path) -> None:
    """Find messages by id or by key."""
    _remember(ctx, admin, dir)


@message.command("get")
@click.argument("message_id")
@click.pass_context
def message_get(ctx: click.Context, message_id: str) -> None:
    _run(ctx, lambda c: c.message(message_id))


@message.command("find")
@click.option("--topic", "topic_name", required=True)
@click.option("--key", required=True)
@click.pass_context
def message_find(ctx: click.Context, topic_name: str, key: str) -> None:
    _run(ctx, lambda c: c.messages_by_key(topic_name, key))


@admin_options
@click.command("stats")
@click.pass_context
def stats(ctx: click.Context, admin: str | None, dir: Path) -> None:
    """Store and messaging statistics of a broker."""
    _remember(ctx, admin, dir)
    _run(ctx, lambda c: c.stats())


COMMANDS = [topic, group, message, stats]
