"""BrokerServer: one broker process — store, messaging runtime, gRPC and admin HTTP on
one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import uvicorn

from rocketcluster.api.admin_guard import guard_admin
from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.api.generated import ha_pb2_grpc
from rocketcluster.api.tls import ClientTls, add_port, load_material, server_ssl_context
from rocketcluster.broker.admin.app import create_admin_app
from rocketcluster.broker.client_port import BindError, add_services, bind, client_server
from rocketcluster.broker.collector import PauseObserver
from rocketcluster.broker.front.frames import CONSUME_SERVICE as CONSUME_DESCRIPTOR
from rocketcluster.broker.front.frames import MESSAGING_SERVICE as MESSAGING_DESCRIPTOR
from rocketcluster.broker.front.launch import LaunchedFront, discard, launch
from rocketcluster.broker.front.metrics import (
    STORE_PROCESS,
    register_front_metrics,
    register_process_metrics,
)
from rocketcluster.broker.front.sizing import resolve
from rocketcluster.broker.front.supervisor import FrontSupervisor
from rocketcluster.broker.ha.role import Role, RoleManager
from rocketcluster.broker.kube_label import HttpPodPatcher, PodLabeler, PodTarget
from rocketcluster.broker.loop_watchdog import BLOCK_BUCKETS, LoopWatchdog
from rocketcluster.broker.messaging.admission import ClientAdmission
from rocketcluster.broker.messaging.catalogue_sync import CatalogueService
from rocketcluster.broker.messaging.consume_service import ConsumeServicer
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.messaging.service import MessagingServicer
from rocketcluster.broker.metrics import BrokerMetrics
from rocketcluster.broker.store import DiskFullPolicy, FlushMode, MessageStore, StoreConfig

log = logging.getLogger(__name__)

GRACE_SECONDS = 2.0
# No front serving for this long (each restart failing): /healthz fails, the pod restarts.
FRONTS_DOWN_LIVENESS_S = 60.0


def store_config(config: BrokerProcessConfig) -> StoreConfig:
    settings: dict[str, object] = {
        "root_dir": config.data_dir / "store",
        "flush": FlushMode(config.flush.value),
        "max_message_bytes": config.max_message_bytes,
        "retention_hours": config.retention_hours,
        "disk_full": DiskFullPolicy(config.disk_full.value),
    }
    tiered = config.tiered_storage
    if tiered.enabled and tiered.local_retention_hours is not None:
        # What the tier holds may go sooner; what it does not is never deleted.
        settings["retention_hours"] = tiered.local_retention_hours
    if config.segment_size:
        settings["segment_size"] = config.segment_size
    for guard in ("disk_max_used_ratio", "disk_full_ratio"):
        value = getattr(config, guard)
        if value is not None:
            settings[guard] = value
    return StoreConfig.model_validate(settings)


class _AdminServer(uvicorn.Server):
    """uvicorn without its own signal handling: the broker owns SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HAServicer(ha_pb2_grpc.HAServiceServicer):
    """Replicate: served by the master's HAMaster (refused by a broker that is not);
    PrepareHandover / AbortHandover: a graceful switchover (ha/handover.py)."""

    def __init__(self, role: RoleManager) -> None:
        self._role = role

    async def Replicate(
        self, request_iterator: AsyncIterator[hpb.SlaveMessage], context: Any
    ) -> AsyncIterator[hpb.MasterMessage]:
        master = self._role.ha_master
        if master is None:
            yield hpb.MasterMessage(handshake=hpb.HandshakeReply(refused="not ready"))
            return
        async for message in master.serve(request_iterator):
            yield message

    async def PrepareHandover(
        self, request: hpb.HandoverRequest, context: Any
    ) -> hpb.HandoverReply:
        return await self._role.handover.prepare(request)

    async def AbortHandover(self, request: hpb.HandoverRequest, context: Any) -> hpb.HandoverReply:
        return await self._role.handover.abort(request)


class BrokerServer:
    def __init__(self, config: BrokerProcessConfig) -> None:
        self.config = config
        self.store: MessageStore | None = None
        self.runtime: MessagingRuntime | None = None
        self._grpc: grpc.aio.Server | None = None
        self._admin: _AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._ready = False
        self.role: RoleManager | None = None
        self._ha: grpc.aio.Server | None = None
        self.labeler: PodLabeler | None = None
        self.catalogue: CatalogueService | None = None
        self._catalogue_client: ControllerClient | None = None
        self._gc_pauses: PauseObserver | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.fronts: FrontSupervisor | None = None
        self._launched: list[LaunchedFront] = []  # started, not yet handed to self.fronts

    async def start(
        self, abort: asyncio.Event | None = None, launched: list[LaunchedFront] | None = None
    ) -> None:
        """Everything up and serving. ``abort`` (set by SIGTERM): give up where a step
        waits on other processes (the fronts) instead of finishing the start first.

        The fronts start first (``launched``: ``main`` started them before it imported
        this module), so they import while the store recovers and the broker takes its
        role, and a new master serves its clients a bind after it starts to
        (front/launch.py)."""
        cfg = self.config
        self._launched = launch(resolve(cfg.front_processes)) if launched is None else launched
        if cfg.label_pod_role:  # first: a stale "master" label goes before anything else
            target = PodTarget.from_env(os.environ)
            self.labeler = PodLabeler(HttpPodPatcher(target), target.describe())
            self.labeler.start()
        if cfg.tls is not None:  # unusable cert files fail the start before store recovery
            load_material(cfg.tls)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = await MessageStore.open(store_config(cfg))
        metrics = BrokerMetrics(cfg.cluster, cfg.node_id, group=cfg.group)
        self._gc_pauses = PauseObserver(metrics.observe_gc)
        self._gc_pauses.install()
        watchdog = LoopWatchdog(
            metrics.histogram(
                "rocketcluster_event_loop_block_seconds",
                "Seconds the broker's event loop was held at a time (counted from 1 s: "
                "requests, replication and controller heartbeats all waited)",
                BLOCK_BUCKETS,
            )
        )
        self.runtime = MessagingRuntime(cfg, self.store, metrics)
        register_process_metrics(metrics, self._process_ids)
        if cfg.controllers:
            # Few attempts: a poll that fails is simply tried again next time.
            self._catalogue_client = ControllerClient(
                cfg.controllers,
                timeout=2.0,
                attempts=len(cfg.controllers) + 1,
                tls=ClientTls.of(cfg.tls),
            )
        self.catalogue = CatalogueService(
            cfg,
            self.runtime.registry,
            self.store.metadata,
            self.runtime.install_routes,
            self._catalogue_client,
        )
        self.catalogue.restore()
        if cfg.controllers:
            await self._start_replication(self.runtime)
        elif self.labeler is not None:
            self.labeler.set_role(Role.MASTER)  # a standalone broker is its group's master
        self.catalogue.start()  # its first poll follows the registration at once
        self.runtime.start()
        app = guard_admin(
            create_admin_app(
                self.runtime, self._is_ready, self.catalogue, self._client_port_problem
            ),
            cfg.auth,
        )
        admin_config = uvicorn.Config(
            app, host=cfg.bind_host, port=cfg.admin_port, log_level="warning", lifespan="off"
        )
        if cfg.tls is not None:  # https only: uvicorn serves the context it is given
            admin_config.load()
            admin_config.ssl = server_ssl_context(cfg.tls)
        self._admin = _AdminServer(admin_config)
        self._admin_task = asyncio.get_running_loop().create_task(self._admin.serve())
        address = await self._serve_clients(metrics, abort)
        for _ in range(200):  # the admin server binds in its task
            if self._admin.started or self._admin_task.done():
                break
            await asyncio.sleep(0.01)
        if self._admin_task.done():
            raise BindError(f"cannot serve the admin API on {cfg.bind_host}:{cfg.admin_port}")
        self._ready = True
        # From here on: the store's recovery above runs before anything is served.
        self._watchdog = asyncio.get_running_loop().create_task(watchdog.run(), name="watchdog")
        log.info(
            "broker %s serving clients on %s, admin on %s:%d (%s)",
            cfg.node_id,
            address,
            cfg.bind_host,
            cfg.admin_port,
            f"TLS, CA {cfg.tls.ca_file}" if cfg.tls else "plaintext",
        )

    async def _serve_clients(self, metrics: BrokerMetrics, abort: asyncio.Event | None) -> str:
        """The client port: served here, or by front processes relaying to here."""
        cfg = self.config
        assert self.runtime is not None
        fronts = len(self._launched)  # started first thing (start)
        messaging = MessagingServicer(self.runtime)
        consume = ConsumeServicer(self.runtime)
        if fronts:
            self.fronts = FrontSupervisor(
                cfg,
                fronts,
                {MESSAGING_DESCRIPTOR.full_name: messaging, CONSUME_DESCRIPTOR.full_name: consume},
                metrics.observe_rpc,
                logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                self._launched,
            )
            self._launched = []
            register_front_metrics(metrics, self.fronts)
            try:
                await self.fronts.start(abort)
            except RuntimeError as exc:
                raise BindError(f"cannot serve clients on port {cfg.client_port}: {exc}") from exc
            return f"{cfg.bind_host}:{cfg.client_port} ({fronts} front processes)"
        server = client_server(cfg, cfg.client_limits, shared_port=False)
        admission = ClientAdmission(cfg.client_limits, metrics)  # before auth
        add_services(server, cfg, admission, messaging, consume, metrics.observe_rpc)
        address = bind(server, cfg)
        await server.start()
        self._grpc = server
        return address

    async def _start_replication(self, runtime: MessagingRuntime) -> None:
        """A replicated group: the HA endpoint, then the role from the controllers."""
        cfg = self.config
        assert self.store is not None
        self.role = RoleManager(
            cfg, self.store, runtime.apply_metadata, runtime.metadata_snapshot, self._on_role
        )
        ha = grpc.aio.server(
            options=[("grpc.so_reuseport", 0), ("grpc.max_send_message_length", -1)]
        )
        ha_pb2_grpc.add_HAServiceServicer_to_server(HAServicer(self.role), ha)
        address = f"{cfg.bind_host}:{cfg.ha_port}"
        # Mutual TLS: only a replica with a certificate from the cluster's CA replicates.
        if add_port(ha, address, cfg.tls, mutual=True) == 0:
            raise BindError(f"cannot serve replication on {address}")
        await ha.start()
        self._ha = ha
        await self.role.start()
        runtime.attach_role(self.role)

    def _process_ids(self) -> dict[str, int]:
        pids = {STORE_PROCESS: os.getpid()}
        if self.fronts is not None:
            pids.update(self.fronts.pids())
        return pids

    def _on_role(self, role: str) -> None:
        assert self.runtime is not None
        self.runtime.on_role(role)
        if self.labeler is not None:
            self.labeler.set_role(role)  # never waits: the label follows on its own task

    def _client_port_problem(self, for_liveness: bool) -> str | None:
        if self.fronts is None:
            return None
        return self.fronts.problem(FRONTS_DOWN_LIVENESS_S if for_liveness else 0.0)

    def _is_ready(self) -> bool:
        """Ready once serving and, when labelling its pod, once the label it had before
        a restart is gone (the Service must not select a stale master)."""
        fronts_serve = self.fronts is None or self.fronts.serving > 0
        return self._ready and fronts_serve and (self.labeler is None or self.labeler.labelled)

    async def stop(self) -> None:
        self._ready = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if self._gc_pauses is not None:
            self._gc_pauses.uninstall()
        if self.catalogue is not None:
            await self.catalogue.stop()
        if self._catalogue_client is not None:
            await self._catalogue_client.close()
        if self.role is not None:
            await self.role.stop()
        if self._ha is not None:
            await self._ha.stop(0.5)
        if self.fronts is not None:
            await self.fronts.stop()
        if self._launched:  # the start failed before the fronts were handed over
            await asyncio.to_thread(discard, self._launched)
            self._launched = []
        if self._grpc is not None:
            await self._grpc.stop(GRACE_SECONDS)
        if self.runtime is not None:
            await self.runtime.stop()
        if self._admin is not None and self._admin_task is not None:
            self._admin.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._admin_task
        if self.labeler is not None:
            await self.labeler.stop()
        if self.store is not None:
            await self.store.close()
