"""ControllerProcessConfig: what one controller member needs (rendered by the operator
or by ``rocketctl local``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rocketcluster.api.auth import AuthProcessConfig
from rocketcluster.api.broker_config import ADMIN_PORT, CONTROLLER_PORT
from rocketcluster.api.tls import TlsFiles


class ControllerMember(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    id: int = Field(ge=1)
    raft_address: str  # host:port of its gRPC endpoint (Raft and the broker API)
    admin_address: str  # host:port of its admin HTTP


class ControllerProcessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    cluster: str
    node_id: int = Field(ge=1)
    members: list[ControllerMember]
    data_dir: Path
    bind_host: str = "0.0.0.0"
    raft_port: int = Field(default=CONTROLLER_PORT, ge=0, le=65535)
    admin_port: int = Field(default=ADMIN_PORT, ge=0, le=65535)
    tick_ms: int = Field(default=100, ge=10)
    election_tick: int = Field(default=8, ge=2)
    snapshot_every: int = Field(default=1000, ge=10)
    broker_heartbeat_timeout_ms: int = Field(default=3000, ge=100)
    election_scan_ms: int = Field(default=500, ge=50)
    unclean_election: bool = False
    # How many in-sync replicas acknowledge a write (the brokers' sync inSyncReplicas;
    # None for async replication or allAckInSyncStateSet). Elections then wait for
    # enough alive in-sync replicas that one of them holds every acknowledged write.
    write_quorum: int | None = Field(default=None, ge=1)
    # TLS (api/tls.py): the Raft / broker port requires certificates from the CA
    # (mutual TLS), admin HTTP authenticates the server; None: plaintext.
    # Left out of the file when off: a cluster without TLS renders the same files (and
    # pod hashes) as before the field existed, so upgrading the operator rolls nothing.
    tls: TlsFiles | None = Field(default=None, exclude_if=lambda v: v is None)
    # security.auth: the admin token file its admin API and /metrics require.
    # Left out of the rendered file while off: configs (and pod hashes) of clusters
    # without auth stay as they were.
    auth: AuthProcessConfig = Field(
        default_factory=AuthProcessConfig, exclude_if=lambda a: not a.enabled
    )

    def member(self, node_id: int) -> ControllerMember:
        for m in self.members:
            if m.id == node_id:
                return m
        raise KeyError(f"no controller member {node_id}")

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(by_alias=True, indent=2))

    @classmethod
    def load(cls, path: Path) -> ControllerProcessConfig:
        return cls.model_validate(json.loads(path.read_text()))
