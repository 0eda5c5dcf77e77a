"""`rocketctl console`: the web console for the local cluster in ``--dir``, served
from this process until Ctrl-C (the same console the operator deploys next to a
cluster in Kubernetes, configured from the local cluster's own state)."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from rocketcluster.api.console_config import ConsoleAuth, ConsoleBroker, ConsoleConfig
from rocketcluster.api.tls import admin_scheme
from rocketcluster.ctl.local.addresses import bindable
from rocketcluster.ctl.local.auth import admin_token_path, users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError

CONSOLE_DIR = "console"


def local_console_config(
    state: LocalClusterState, directory: Path, reports: Path | None
) -> ConsoleConfig:
    """The console's config for the local cluster ``state`` describes: its
    controllers' and brokers' admin URLs, its CA, its admin token and users file."""
    tls = state.client_tls()
    scheme = admin_scheme(tls)
    token = admin_token_path(directory)
    auth = ConsoleAuth(
        enabled=token.exists(),
        admin_token_file=token if token.exists() else None,
        users_file=users_path(directory) if users_path(directory).exists() else None,
    )
    return ConsoleConfig(
        cluster=state.name,
        controllers=[f"{scheme}://{a}" for a in state.controller_admin_addresses()],
        brokers=[
            ConsoleBroker(name=p.name, group=group, admin=f"{scheme}://{p.admin}")
            for group in state.groups()
            for p in state.brokers(group)
        ],
        ca_file=tls.ca_file if tls is not None else None,
        auth=auth,
        reports_dir=reports,
        audit_log=directory / CONSOLE_DIR / "audit.log",
    )


@click.command("console")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=Path(".rocketcluster"),
    show_default=True,
    help="the local cluster's directory",
)
@click.option("--listen", default="127.0.0.1:8090", show_default=True, help="HOST:PORT to serve on")
@click.option(
    "--reports",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("reports"),
    show_default=True,
    help="where `rocketctl report` wrote its runs (the Health reports page)",
)
def console(directory: Path, listen: str, reports: Path) -> None:
    """Serve the web console for the local cluster in --dir; prints the URL."""
    from rocketcluster.console.main import ConfigError, split_listen

    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    if state is None:
        raise click.ClickException(
            f"no local cluster runs in {directory}: start one with `rocketctl local up "
            f"-f examples/cluster.yaml --dir {directory}`"
        )
    try:
        host, port = split_listen(listen)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if not bindable(host, port):
        raise click.ClickException(
            f"{host}:{port} is in use by another program: give another --listen HOST:PORT"
        )
    config = local_console_config(state, directory.resolve(), reports.resolve())
    out = directory / CONSOLE_DIR / "console.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(config.model_dump(mode="json", by_alias=True), indent=2) + "\n")
    import uvicorn

    from rocketcluster.console.app import create_console_app

    app = create_console_app(config)
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    click.echo(f"console of {state.name}: http://{shown}:{port}/  (Ctrl-C stops it)")
    if config.auth.enabled:
        click.echo(f"  sign in with the admin token in {admin_token_path(directory)}")
    click.echo(f"  config: {out}; audit log: {config.audit_log}")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


COMMANDS = [console]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def running_console(
    directory: Path, port: int, reports: Path | None = None, ready_within_s: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """`rocketctl console` for the local cluster in ``directory`` as its own process
    (tests and the console benchmark), ready when the block starts, stopped by its PID
    when it ends; its output goes to ``directory/console/process.log``."""
    from rocketcluster.ctl.testing import serving_rocketctl

    args = ["console", "--dir", str(directory), "--listen", f"127.0.0.1:{port}"]
    if reports is not None:
        args += ["--reports", str(reports)]
    log_path = directory / CONSOLE_DIR / "process.log"
    with serving_rocketctl(
        args, port, log_path, what="console", ready_within_s=ready_within_s
    ) as proc:
        yield proc
