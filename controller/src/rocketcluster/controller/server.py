"""ControllerServer: one controller member — Raft node, gRPC API, admin HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import grpc
import uvicorn

from rocketcluster.api.admin_guard import guard_admin
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.api.generated import controller_pb2_grpc
from rocketcluster.api.tls import ClientTls, add_port, load_material, server_ssl_context
from rocketcluster.controller.admin import create_controller_app
from rocketcluster.controller.core import ControllerCore
from rocketcluster.controller.raft.disk import DiskStorage
from rocketcluster.controller.raft.node import NodeOptions, RaftNode
from rocketcluster.controller.raft.transport import GrpcTransport
from rocketcluster.controller.service import ControllerServicer

log = logging.getLogger(__name__)

KEEPALIVE_MS = 2000


class _AdminServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ControllerServer:
    def __init__(self, config: ControllerProcessConfig) -> None:
        self.config = config
        self.core: ControllerCore | None = None
        self._grpc: grpc.aio.Server | None = None
        self._transport: GrpcTransport | None = None
        self._admin: _AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None

    def _node(self, machine: Any) -> RaftNode:
        cfg = self.config
        storage = DiskStorage(cfg.data_dir / "raft")
        if storage.torn_bytes:
            log.warning("raft log had a torn tail of %d bytes: cut", storage.torn_bytes)
        options = NodeOptions(
            tick_ms=cfg.tick_ms, election_tick=cfg.election_tick, snapshot_every=cfg.snapshot_every
        )
        voters = tuple(sorted(m.id for m in cfg.members))
        return RaftNode(cfg.node_id, voters, storage, machine, options)

    async def start(self) -> None:
        cfg = self.config
        if cfg.tls is not None:  # unusable cert files fail the start before the Raft log
            load_material(cfg.tls)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.core = ControllerCore(cfg, self._node)
        core = self.core
        core.node.on_soft_state.append(lambda _soft: core.leadership_changed())
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", -1),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
                # Ping every client connection: a broker's WatchRoles stream is what
                # keeps it alive here, and without our own pings a partitioned or
                # frozen master's stream would look open until TCP gave up (minutes),
                # so it was never replaced. Now it closes within ~4 s.
                ("grpc.keepalive_time_ms", KEEPALIVE_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_MS),
                # This gRPC times a ping's ack with the ping timeout (60 s by default),
                # not with the keepalive timeout: set both.
                ("grpc.http2.ping_timeout_ms", KEEPALIVE_MS),
                ("grpc.http2.max_pings_without_data", 0),
            ]
        )
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerServicer(self.core), server
        )
        address = f"{cfg.bind_host}:{cfg.raft_port}"
        # Mutual TLS: Raft peers, brokers and tools present a certificate from the CA.
        if add_port(server, address, cfg.tls, mutual=True) == 0:
            raise RuntimeError(f"cannot listen on {address}")
        await server.start()
        self._grpc = server
        peers = {m.id: m.raft_address for m in cfg.members if m.id != cfg.node_id}
        self._transport = GrpcTransport(
            peers, self.core.node.report_unreachable, ClientTls.of(cfg.tls)
        )
        self.core.node.start(self._transport)
        self.core.start()
        app = guard_admin(create_controller_app(self.core), cfg.auth)
        admin_config = uvicorn.Config(
            app, host=cfg.bind_host, port=cfg.admin_port, log_level="warning", lifespan="off"
        )
        if cfg.tls is not None:  # https only: uvicorn serves the context it is given
            admin_config.load()
            admin_config.ssl = server_ssl_context(cfg.tls)
        self._admin = _AdminServer(admin_config)
        self._admin_task = asyncio.get_running_loop().create_task(self._admin.serve())
        log.info(
            "controller %d serving on %s (admin %s:%d, %s)",
            cfg.node_id,
            address,
            cfg.bind_host,
            cfg.admin_port,
            f"mutual TLS, CA {cfg.tls.ca_file}" if cfg.tls else "plaintext",
        )

    async def stop(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(1.0)
        if self.core is not None:
            await self.core.stop()
            await self.core.node.stop()
        if self._transport is not None:
            await self._transport.close()
        if self._admin is not None and self._admin_task is not None:
            self._admin.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._admin_task
