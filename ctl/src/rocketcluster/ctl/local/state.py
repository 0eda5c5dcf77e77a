"""What ``DIR/cluster.json`` says, typed: the local cluster ``LocalRuntime.up`` started.

``cluster.json`` is the only record of a local cluster — its processes (name, role,
pid, addresses, config and log files), its client and group endpoints, its TLS files —
and every tool that acts on a running cluster reads it. Reading it as raw dicts spread
the knowledge of its keys (and of how a broker's group follows from its name) over
dozens of places, each failing with a bare ``KeyError`` on a file from another
version; this model reads it once, says which file and which field is wrong, and
answers the questions those places ask (``controllers()``, ``brokers(group)``,
``process(name)``, ``broker_serving(endpoint)``).

Read-only on purpose: ``LocalRuntime`` alone writes the file (it is the one that
knows the pids it started); the model never goes back to disk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rocketcluster.api.tls import ClientTls, TlsFiles

Role = Literal["controller", "broker", "proxy"]


class LocalStateError(ValueError):
    """A ``cluster.json`` that cannot be used: says which file and what is wrong."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(
            f"{source}: {reason} (written by `rocketctl local up`; if it came from "
            "another version, run `rocketctl local down` with that version and up again)"
        )
        self.source = source
        self.reason = reason


class _Record(BaseModel):
    # Unknown keys are ignored: a newer runtime may record more than this model reads.
    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )


class LocalProcess(_Record):
    """One process ``LocalRuntime`` started: ``addresses`` maps a port's kind
    (``client``, ``admin``, ``raft``; a group name on the endpoints proxy) to
    ``host:port``."""

    name: str
    role: Role
    pid: int
    host: str
    addresses: dict[str, str]
    config_path: Path
    log_path: Path
    argv: tuple[str, ...] = ()
    # A broker's group (recorded since it was needed here; older files: from the name).
    group: str | None = None

    def address(self, kind: str) -> str:
        """The ``host:port`` of this process's ``kind`` port."""
        try:
            return self.addresses[kind]
        except KeyError:
            kinds = ", ".join(sorted(self.addresses)) or "none"
            raise LocalStateError(
                "cluster.json", f"{self.role} {self.name} has no {kind} address (it has {kinds})"
            ) from None

    @property
    def admin(self) -> str:
        return self.address("admin")

    @property
    def client(self) -> str:
        return self.address("client")

    @property
    def raft(self) -> str:
        return self.address("raft")

    def as_dict(self) -> dict[str, Any]:
        """The record as ``cluster.json`` holds it, for code that still takes dicts."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class LocalClusterState(_Record):
    """The whole file. ``clientEndpoints``, ``controllers`` and ``groupEndpoints`` are
    written once every process is ready: a file read while ``up`` still starts them
    has the processes only (and these fields empty)."""

    name: str
    directory: Path
    processes: tuple[LocalProcess, ...]
    # rocketctl's own certificate and the cluster's CA; None: the cluster is plaintext.
    tls: TlsFiles | None = None
    client_endpoints: str = ""
    # The controllers' Raft addresses, ";"-separated (what brokers register with).
    controller_endpoints: str = Field(default="", alias="controllers")
    group_endpoints: dict[str, str] = Field(default_factory=dict)
    started_at: float | None = None

    @classmethod
    def parse(cls, data: object, source: str = "cluster.json") -> LocalClusterState:
        """``data`` (the parsed JSON) as the model; a ``LocalStateError`` naming
        ``source`` and every field that is wrong otherwise."""
        if not isinstance(data, Mapping):
            raise LocalStateError(source, f"not a JSON object but {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
            )
            raise LocalStateError(source, problems) from None

    @classmethod
    def load(cls, path: Path) -> LocalClusterState:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise LocalStateError(str(path), f"cannot read it: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise LocalStateError(str(path), f"not JSON: {exc}") from exc
        return cls.parse(data, str(path))

    # -- who is who --------------------------------------------------------------

    def controllers(self) -> list[LocalProcess]:
        return [p for p in self.processes if p.role == "controller"]

    def proxies(self) -> list[LocalProcess]:
        """The group endpoints' process (one per replicated cluster, none standalone)."""
        return [p for p in self.processes if p.role == "proxy"]

    def brokers(self, group: str | None = None) -> list[LocalProcess]:
        """Every broker, or the replicas of broker group ``group``."""
        return [
            p
            for p in self.processes
            if p.role == "broker" and (group is None or self.group_of(p) == group)
        ]

    def group_of(self, process: LocalProcess) -> str | None:
        """The broker group of a broker (None for other roles). Files written before
        the group was recorded: a replica is named ``<group>-<replica>``, a standalone
        broker (a cluster without controllers) after its group."""
        if process.role != "broker":
            return None
        if process.group is not None:
            return process.group
        return process.name.rpartition("-")[0] if self.controllers() else process.name

    def groups(self) -> list[str]:
        """The broker groups, sorted."""
        return sorted({g for p in self.brokers() if (g := self.group_of(p)) is not None})

    def process(self, name: str) -> LocalProcess:
        for p in self.processes:
            if p.name == name:
                return p
        names = ", ".join(p.name for p in self.processes) or "none"
        raise LookupError(f"no process named {name!r} in cluster {self.name} (it has: {names})")

    def listening_at(self, address: str) -> LocalProcess | None:
        """The process with a port at ``address`` (``host:port``): which controller an
        admin address found as leader belongs to."""
        return next((p for p in self.processes if address in p.addresses.values()), None)

    def broker_serving(self, client: str, group: str | None = None) -> LocalProcess | None:
        """The broker whose client port is ``client`` (what a broker registers with the
        controllers), within ``group`` when given."""
        return next((p for p in self.brokers(group) if p.addresses.get("client") == client), None)

    # -- how to reach it ---------------------------------------------------------

    def controller_admin_addresses(self) -> list[str]:
        """The controllers' admin ``host:port``, in member order."""
        return [p.admin for p in self.controllers()]

    def client_tls(self) -> ClientTls | None:
        """What rocketctl presents and trusts to reach the cluster (None: plaintext)."""
        return ClientTls.of(self.tls)
