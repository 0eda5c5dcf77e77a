"""`rocketctl local ...`: run a manifest as local processes."""

from __future__ import annotations

import json
from pathlib import Path

import click

from rocketcluster.api.cluster import ManifestError
from rocketcluster.ctl.local.auth import admin_token_path, users_path
from rocketcluster.ctl.local.runtime import LocalRuntime, LocalRuntimeError

DEFAULT_DIR = Path(".rocketcluster")


def _runtime(directory: Path) -> LocalRuntime:
    return LocalRuntime(directory)


@click.group("local")
def local() -> None:
    """Run a RocketCluster manifest as plain processes on this machine."""


@local.command("up")
@click.option(
    "-f", "--file", "manifest", type=click.Path(path_type=Path, exists=True), required=True
)
@click.option(
    "--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True
)
@click.option(
    "--timeout", type=float, default=90.0, show_default=True, help="seconds to wait for ready"
)
def up(manifest: Path, directory: Path, timeout: float) -> None:
    """Start the manifest's processes in the background and wait until they serve.

    The processes inherit this command's environment. With spec.tieredStorage on S3,
    set the AWS_* variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)
    here: s3.credentialsSecret is for Kubernetes only. A relative posix.path is a
    directory under --dir, shared by every broker."""
    try:
        state = _runtime(directory).up(manifest, timeout=timeout)
    except (ManifestError, LocalRuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"cluster {state['name']} is up; client endpoints: {state['clientEndpoints']}")
    for proc in state["processes"]:
        click.echo(
            f"  {proc['name']:<24} pid {proc['pid']:<8} {proc['role']:<10} {proc['addresses']}"
        )
    click.echo(f"state: {Path(directory) / 'cluster.json'}")
    if state.get("tls"):
        ca = state["tls"]["caFile"]
        click.echo(
            f"TLS on every port; the CA is {ca}. Official clients: tls_enable=True, one "
            f"client endpoint (the Python client cannot verify a list), and "
            f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca} in their environment; "
            f"curl --cacert {ca} https://<admin>/readyz"
        )
    users = users_path(Path(directory))
    if users.exists():  # security.auth: where the keys are (local/auth.py)
        click.echo(
            f"auth: users in {users} (0600): `rocketctl user list --dir {directory}`, "
            f"`rocketctl user keys NAME --dir {directory}`; admin token in "
            f"{admin_token_path(Path(directory))}"
        )


@local.command("down")
@click.option(
    "--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True
)
def down(directory: Path) -> None:
    """Stop every process recorded in DIR/cluster.json."""
    stopped = _runtime(directory).down()
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@local.command("status")
@click.option(
    "--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True
)
def status(directory: Path) -> None:
    """Show the recorded cluster and which of its processes run."""
    runtime = _runtime(directory)
    state = runtime.state()
    if state is None:
        raise click.ClickException(f"no cluster recorded in {directory}")
    running = {p["name"] for p in runtime.running()}
    for proc in state["processes"]:
        proc["running"] = proc["name"] in running
    click.echo(json.dumps(state, indent=2))


_ACT_HELP = {
    "restart": "Restart one process by name, with this command's environment (AWS_* included)."
}


def _act(verb: str) -> click.Command:
    @click.command(verb, help=_ACT_HELP.get(verb, f"{verb.capitalize()} one process by name."))
    @click.argument("name")
    @click.option(
        "--dir",
        "directory",
        type=click.Path(path_type=Path),
        default=DEFAULT_DIR,
        show_default=True,
    )
    def command(name: str, directory: Path) -> None:
        try:
            getattr(_runtime(directory), verb)(name)
        except LocalRuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"{verb}: {name}")

    return command


for _verb in ("kill", "pause", "resume", "restart"):
    local.add_command(_act(_verb))
