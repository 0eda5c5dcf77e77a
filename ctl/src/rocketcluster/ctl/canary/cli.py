"""``rocketctl canary``: probe every broker group of a cluster until Ctrl-C (or
SIGTERM), printing one line per probe and serving ``/metrics``.

- ``--config FILE``: what the operator renders into the canary's ConfigMap
  (:class:`~rocketcluster.api.canary_config.CanaryConfig`), re-read when it changes;
- ``--dir DIR``: the local cluster ``rocketctl local up`` runs there: its group
  endpoints, its CA; the canary's topic and consumer group are put into the
  catalogue first when the cluster has controllers (what the operator does in
  Kubernetes). The config is written to ``DIR/canary/canary.json``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import click

from rocketcluster.api.canary_config import (
    CANARY_USER,
    DEFAULT_CONSUMER_GROUP,
    DEFAULT_TOPIC,
    CanaryConfig,
    CanaryConfigError,
    CanaryCredentials,
    CanaryGroup,
    catalogue_entries,
    load_canary_config,
)
from rocketcluster.ctl.local.addresses import bindable
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError

CANARY_DIR: Final = "canary"
CONFIG_FILE: Final = "canary.json"
DEFAULT_LISTEN: Final = "127.0.0.1:8091"


class CanarySetupError(RuntimeError):
    """The local cluster cannot be probed as it is: says what to do."""


def local_canary_config(
    state: LocalClusterState,
    directory: Path,
    *,
    topic: str = DEFAULT_TOPIC,
    consumer_group: str = DEFAULT_CONSUMER_GROUP,
    interval_seconds: float = 5.0,
    timeout_seconds: float = 10.0,
) -> CanaryConfig:
    """The canary's config for the local cluster ``state`` describes: each group at
    its group endpoint (standalone brokers at their own client port), its CA, and
    with auth on the credentials of the user ``rocketcluster-canary`` of the local
    users file (its secret key written to ``DIR/canary/secret-key``, mode 0600)."""
    if state.group_endpoints:
        groups = [CanaryGroup(name=g, endpoint=e) for g, e in sorted(state.group_endpoints.items())]
    else:  # standalone: one broker per group, its own client port
        groups = [CanaryGroup(name=g, endpoint=state.brokers(g)[0].client) for g in state.groups()]
    tls = state.tls
    return CanaryConfig(
        cluster=state.name,
        groups=groups,
        topic=topic,
        consumer_group=consumer_group,
        interval_seconds=interval_seconds,
        timeout_seconds=timeout_seconds,
        ca_file=tls.ca_file if tls is not None else None,
        credentials=_local_credentials(directory),
    )


def _local_credentials(directory: Path) -> CanaryCredentials | None:
    from rocketcluster.api.auth import AuthFileError, UsersFile, write_private
    from rocketcluster.ctl.local.auth import users_path

    path = users_path(directory)
    if not path.exists():
        return None
    try:
        user = UsersFile.load(path).find(CANARY_USER)
    except AuthFileError as exc:
        raise CanarySetupError(str(exc)) from exc
    if user is None:
        raise CanarySetupError(
            f"the local cluster in {directory} runs with security.auth: the canary signs "
            f"as user {CANARY_USER!r}, which it does not have. Add it to spec.users (pub "
            f"and sub on topic {DEFAULT_TOPIC}, sub on group {DEFAULT_CONSUMER_GROUP}) "
            f"and run `rocketctl local up` again, or give `--config FILE` with credentials"
        )
    key_file = directory / CANARY_DIR / "secret-key"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    write_private(key_file, user.secret_key)
    return CanaryCredentials(access_key=user.access_key, secret_key_file=key_file)


def ensure_catalogue(state: LocalClusterState, directory: Path, config: CanaryConfig) -> str:
    """Put the canary's topic and consumer group into the local cluster's catalogue
    when missing (a cluster with controllers); what was done, in a few words. A
    standalone cluster serves the topics of its brokers' config only: the topic must
    be declared there."""
    from rocketcluster.api.catalogue import canonical_spec
    from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError
    from rocketcluster.ctl.local.auth import local_admin_token

    if not state.controllers():
        return "standalone cluster: the topic must be in spec.topics"
    topic, group = catalogue_entries(config.topic, config.consumer_group)
    try:
        with ControllerAdmin(
            state.controller_admin_addresses(),
            tls=state.client_tls(),
            token=local_admin_token(directory),
        ) as admin:
            catalogue = admin.catalogue()
            topics = {t["name"] for t in catalogue.get("topics") or []}
            groups = {g["name"] for g in catalogue.get("consumerGroups") or []}
            put_topics = [canonical_spec(topic)] if topic.name not in topics else []
            put_groups = [canonical_spec(group)] if group.name not in groups else []
            if put_topics or put_groups:
                admin.put_entries(put_topics, put_groups)
                return f"put {topic.name} and {group.name} into the catalogue"
    except ControllerAdminError as exc:
        raise CanarySetupError(
            f"cannot put the canary's topic into the catalogue of {state.name}: {exc}"
        ) from exc
    return "topic and consumer group already in the catalogue"


def wait_served(config: CanaryConfig, timeout_s: float = 30.0) -> list[str]:
    """Until every group's broker serves the canary's topic (a broker applies a new
    catalogue within seconds), so the first probes measure the cluster rather than
    the catalogue's propagation; the groups that still do not, after ``timeout_s``."""
    import asyncio as aio
    import time

    from rocketcluster.api.client.lean import LeanClient
    from rocketcluster.api.tls import ClientTls

    creds = config.credentials
    credentials = (creds.access_key, creds.secret_key_file.read_text().strip()) if creds else None
    tls = ClientTls(ca_file=config.ca_file) if config.ca_file is not None else None

    async def served(endpoint: str) -> bool:
        deadline = time.monotonic() + timeout_s
        async with LeanClient(endpoint, timeout=5.0, tls=tls, credentials=credentials) as client:
            while time.monotonic() < deadline:
                try:
                    await client.query_route(config.topic)
                    return True
                except Exception:  # not yet (TOPIC_NOT_FOUND), or not reachable yet
                    await aio.sleep(0.2)
        return False

    async def every() -> list[bool]:
        return list(await aio.gather(*(served(g.endpoint) for g in config.groups)))

    return [g.name for g, ok in zip(config.groups, aio.run(every()), strict=True) if not ok]


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{listen!r} is not HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


@click.command("canary")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="a canary config file (JSON or YAML; what the operator renders), re-read on change",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="probe the local cluster in this directory instead of --config",
)
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT of /metrics")
@click.option(
    "--interval",
    type=click.FloatRange(0.2, 300),
    default=5.0,
    show_default=True,
    help="--dir: seconds between two probes of a group",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.5, 300),
    default=10.0,
    show_default=True,
    help="--dir: seconds a probe's message may take to come back",
)
def canary(
    config_path: Path | None, directory: Path | None, listen: str, interval: float, timeout: float
) -> None:
    """Send and receive a message through every broker group every few seconds; print
    one line per probe and serve the results on /metrics (Ctrl-C stops it)."""
    if (config_path is None) == (directory is None):
        raise click.UsageError("give exactly one of --config FILE or --dir DIR")
    host, port = split_listen(listen)
    if not bindable(host, port):
        raise click.ClickException(
            f"{host}:{port} is in use by another program: give another --listen HOST:PORT"
        )
    if directory is not None:
        config_path = _prepare_local(directory, interval, timeout)
    assert config_path is not None
    try:
        config = load_canary_config(config_path)
    except CanaryConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    from rocketcluster.ctl.canary.runner import Canary, serve

    groups = ", ".join(f"{g.name} ({g.endpoint})" for g in config.groups) or "no group yet"
    click.echo(
        f"canary of {config.cluster}: topic {config.topic}, consumer group "
        f"{config.consumer_group}, every {config.interval_seconds:g} s, timeout "
        f"{config.timeout_seconds:g} s"
    )
    click.echo(f"  groups: {groups}")
    click.echo(f"  metrics: http://{host}:{port}/metrics  (config {config_path}; Ctrl-C stops it)")
    runner = Canary(config, config_path, echo=click.echo)
    asyncio.run(serve(runner, host, port))


def _prepare_local(directory: Path, interval: float, timeout: float) -> Path:
    from rocketcluster.ctl.local.runtime import LocalRuntime

    try:
        state = LocalRuntime(directory).cluster_state()
    except LocalStateError as exc:
        raise click.ClickException(str(exc)) from exc
    if state is None or not state.groups():
        raise click.ClickException(
            f"no local cluster runs in {directory}: start one with `rocketctl local up "
            f"-f examples/cluster.yaml --dir {directory}`"
        )
    try:
        config = local_canary_config(
            state, directory.resolve(), interval_seconds=interval, timeout_seconds=timeout
        )
        click.echo(ensure_catalogue(state, directory.resolve(), config))
        late = wait_served(config)
        if late:
            click.echo(f"{config.topic} is not served yet by {', '.join(late)}: probing anyway")
    except CanarySetupError as exc:
        raise click.ClickException(str(exc)) from exc
    out = directory / CANARY_DIR / CONFIG_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(config.model_dump(mode="json", by_alias=True), indent=2) + "\n")
    return out


COMMANDS = [canary]


@contextmanager
def running_canary(
    directory: Path,
    port: int,
    *,
    interval: float = 1.0,
    timeout: float = 5.0,
    ready_within_s: float = 60,
) -> Iterator[subprocess.Popen[bytes]]:
    """``rocketctl canary --dir`` for the local cluster in ``directory`` as its own
    process (tests), serving when the block starts, stopped by its PID when it ends;
    its output is appended to ``directory/canary/process.log``."""
    from rocketcluster.ctl.testing import serving_rocketctl

    args = ["canary", "--dir", str(directory), "--listen", f"127.0.0.1:{port}"]
    args += ["--interval", str(interval), "--timeout", str(timeout)]
    log_path = directory / CANARY_DIR / "process.log"
    with serving_rocketctl(
        args, port, log_path, what="canary", ready_within_s=ready_within_s, append=True
    ) as proc:
        yield proc
