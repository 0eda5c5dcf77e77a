"""`rocketctl report`: the Spark health report of the local cluster (or any cluster
whose controllers this machine reaches), in local Spark."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from rocketcluster.api.auth import ADMIN_TOKEN_ENV
from rocketcluster.api.cluster import ALL_HEALTH_JOBS
from rocketcluster.api.tls import admin_scheme
from rocketcluster.ctl.admin_token import admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalStateError


def local_cluster(directory: Path) -> tuple[str, list[str], dict[str, list[str]]]:
    """The running local cluster's name, controller admin addresses and broker admin
    addresses per group (exact, from its own state: no port convention needed)."""
    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    if state is None:
        raise click.ClickException(
            f"no local cluster runs in {directory}: start one with `rocketctl local up "
            f"-f examples/cluster.yaml --dir {directory}`, or give --controller URL"
        )
    tls = state.client_tls()
    if tls is not None:
        # https with the cluster's CA: the jobs' HTTP client (httpx, in this process and
        # the Spark workers it starts) trusts SSL_CERT_FILE.
        os.environ["SSL_CERT_FILE"] = str(tls.ca_file)
    scheme = admin_scheme(tls)
    controllers = [f"{scheme}://{a}" for a in state.controller_admin_addresses()]
    brokers: dict[str, list[str]] = {}
    for group in state.groups():
        brokers[group] = [f"{scheme}://{p.admin}" for p in state.brokers(group)]
    return state.name, controllers, brokers


@click.command("report")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=Path(".rocketcluster"),
    show_default=True,
    help="the local cluster's directory",
)
@click.option(
    "--controller",
    "controllers",
    multiple=True,
    metavar="URL",
    help="a controller admin endpoint instead of the local cluster (repeatable)",
)
@click.option(
    "--inputs",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="rerun from a Parquet input snapshot instead of a live cluster",
)
@click.option("--save-inputs", is_flag=True, help="keep the inputs read, as a snapshot")
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
@click.option("--jobs", default=",".join(ALL_HEALTH_JOBS), show_default=True)
@click.option(
    "--config",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="YAML/JSON: price table, lag window, tiering minimum age",
)
@click.option("--history-hours", type=float, help="how far back to read (default 24)")
@click.option(
    "--keep",
    type=int,
    default=168,
    show_default=True,
    help="keep the newest N runs under --out, delete older ones (0: all)",
)
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="the Spark master: local[N], or spark://HOST:PORT of a standalone cluster whose "
    "workers see --out at the same path",
)
@click.option(
    "--full",
    is_flag=True,
    help="read the whole window again instead of continuing the last run under --out",
)
@click.option("--json", "as_json", is_flag=True, help="the summary as JSON")
def report(
    directory: Path,
    controllers: tuple[str, ...],
    inputs: Path | None,
    save_inputs: bool,
    out: Path,
    jobs: str,
    config: Path | None,
    history_hours: float | None,
    keep: int,
    master: str,
    full: bool,
    as_json: bool,
) -> None:
    """Consumer lag, SyncStateSet history and tiering candidates, as one HTML report."""
    from rocketcluster.jobs.config import load_config
    from rocketcluster.jobs.inputs import LiveCluster
    from rocketcluster.jobs.pipeline import check_jobs
    from rocketcluster.jobs.run import ReportRequest, readable, run_report
    from rocketcluster.jobs.session import JavaMissingError

    name, brokers = "", dict[str, list[str]]()
    found = list(controllers)
    if inputs is None and not found:
        name, found, brokers = local_cluster(directory)
    token = admin_token(directory)
    if token:  # security.auth: the jobs' cluster reader (and its Spark workers) read it
        os.environ.setdefault(ADMIN_TOKEN_ENV, token)
    try:
        request = ReportRequest(
            out=out,
            jobs=check_jobs([j.strip() for j in jobs.split(",") if j.strip()]),
            live=LiveCluster(found, brokers),
            inputs=inputs,
            save_inputs=save_inputs,
            config=load_config(config) if config else None,
            history_hours=history_hours,
            cluster=name,
            keep=keep,
            master=master,
            full=full,
        )
        outcome = run_report(request, _progress if sys.stderr.isatty() else _quiet)
    except (JavaMissingError, ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        answer: dict[str, Any] = {**outcome.summary, "report": str(outcome.report)}
        click.echo(json.dumps(answer, indent=2, default=str))
    else:
        click.echo("\n".join(readable(outcome)))


def _progress(message: str) -> None:
    click.echo(f"… {message}", err=True)


def _quiet(_: str) -> None:
    """No progress lines when stderr is not a terminal (logs, CI)."""


COMMANDS = [report]
