"""ControllerClient: the controller's gRPC API for brokers and tools.

Requests go to the member believed to lead; a CONTROLLER_NOT_LEADER answer carries
the leader's address, which the client follows (or it tries the next member when no
leader is known yet). Channels use explicit, short reconnect backoff.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from rocketcluster.api.catalogue import Catalogue
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.generated.controller_pb2_grpc import ControllerServiceStub
from rocketcluster.api.tls import ChannelPool, ClientTls

NOT_LEADER = "CONTROLLER_NOT_LEADER"
SUCCESS = "SUCCESS"
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
]
T = TypeVar("T")


@dataclass(frozen=True)
class ControllerAnswer:
    code: str
    message: str
    leader: str
    data: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.code == SUCCESS

    @classmethod
    def of(cls, reply: cpb.ControllerReply) -> ControllerAnswer:
        return cls(
            reply.code, reply.message, reply.leader, json.loads(reply.json) if reply.json else None
        )


class ControllerUnavailable(RuntimeError):
    pass


class ControllerClient:
    def __init__(
        self,
        addresses: list[str],
        *,
        timeout: float = 3.0,
        attempts: int = 10,
        tls: ClientTls | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("at least one controller address is needed")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.attempts = attempts
        # Channels that follow a renewal of our certificate (mutual TLS port).
        self._channels = ChannelPool(tls, CHANNEL_OPTIONS)
        self._leader = self.addresses[0]
        # The controllers' port is mutual TLS when on: present our certificate.
        self.tls = tls

    def stub(self, address: str) -> ControllerServiceStub:
        return ControllerServiceStub(self._channels.channel(address))

    async def close(self) -> None:
        await self._channels.close()

    async def _leader_call(
        self, call: Callable[[ControllerServiceStub], Awaitable[cpb.ControllerReply]]
    ) -> ControllerAnswer:
        """Call the leader, following redirects and retrying while none is known."""
        last = "no attempt"
        address = self._leader
        for attempt in range(self.attempts):
            try:
                answer = ControllerAnswer.of(await call(self.stub(address)))
            except grpc.aio.AioRpcError as exc:
                # The details say why (e.g. a TLS handshake the controller refused).
                last = f"{address}: {exc.code().name} {exc.details() or ''}".rstrip()
                address = self._next(address)
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
                continue
            if answer.code != NOT_LEADER:
                self._leader = address
                return answer
            last = f"{address}: {answer.message}"
            if answer.leader and answer.leader != address:
                address = answer.leader
            else:
                address = self._next(address)
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
        hint = ""
        if self.tls is not None and "UNAVAILABLE" in last:
            # A refused handshake looks like a closed socket from this side.
            hint = (
                "; with TLS on, check that this process's certificate comes from the "
                f"cluster's CA ({self.tls.ca_file}) and names the address it is dialled at"
            )
        raise ControllerUnavailable(f"no controller leader answered ({last}){hint}")

    def _next(self, address: str) -> str:
        if address not in self.addresses:
            return self.addresses[0]
        return self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]

    # -- the API -------------------------------------------------------------------

    async def apply_broker_id(
        self, cluster: str, group: str, broker_id: int, address: str, check_code: str
    ) -> ControllerAnswer:
        request = cpb.ApplyBrokerIdRequest(
            cluster=cluster,
            group=group,
            broker_id=broker_id,
            address=address,
            check_code=check_code,
        )
        return await self._leader_call(lambda s: s.ApplyBrokerId(request, timeout=self.timeout))

    async def register_broker(
        self, cluster: str, group: str, broker_id: int, address: str, client_endpoint: str = ""
    ) -> ControllerAnswer:
        request = cpb.RegisterBrokerRequest(
            cluster=cluster,
            group=group,
            broker_id=broker_id,
            address=address,
            client_endpoint=client_endpoint,
        )
        return await self._leader_call(lambda s: s.RegisterBroker(request, timeout=self.timeout))

    async def alter_sync_state_set(
        self, group: str, master_id: int, master_epoch: int, set_epoch: int, members: list[int]
    ) -> ControllerAnswer:
        request = cpb.AlterSyncStateSetRequest(
            group=group,
            master_id=master_id,
            master_epoch=master_epoch,
            sync_state_set_epoch=set_epoch,
            sync_state_set=members,
        )
        return await self._leader_call(lambda s: s.AlterSyncStateSet(request, timeout=self.timeout))

    async def elect_master(
        self,
        group: str,
        broker_id: int | None = None,
        *,
        designated: bool = False,
        reason: str = "",
    ) -> ControllerAnswer:
        request = cpb.ElectMasterRequest(
            group=group,
            broker_id=-1 if broker_id is None else broker_id,
            designated=designated,
            reason=reason,
        )
        return await self._leader_call(lambda s: s.ElectMaster(request, timeout=self.timeout))

    async def replica_info(self, group: str) -> ControllerAnswer:
        request = cpb.GetReplicaInfoRequest(group=group)
        return await self._leader_call(lambda s: s.GetReplicaInfo(request, timeout=self.timeout))

    async def put_route(
        self, topic: str, queues: int, message_type: str = "NORMAL", groups: list[str] | None = None
    ) -> ControllerAnswer:
        request = cpb.RouteRequest(
            topic=topic, queues=queues, message_type=message_type, groups=groups or []
        )
        return await self._leader_call(lambda s: s.PutRoute(request, timeout=self.timeout))

    async def get_catalogue(self, known_version: int = 0) -> Catalogue | None:
        """The leader's catalogue, or None when ``known_version`` is still current.
        Raises :class:`ControllerUnavailable` when no leader answers."""
        request = cpb.GetCatalogueRequest(known_version=known_version)
        answer = await self._leader_call(lambda s: s.GetCatalogue(request, timeout=self.timeout))
        if not answer.ok:
            raise ControllerUnavailable(f"catalogue refused: {answer.code} {answer.message}")
        return None if answer.data is None else Catalogue.model_validate(answer.data)

    async def heartbeat_all(self, heartbeat: cpb.BrokerHeartbeat) -> dict[str, str]:
        """Heartbeat every member (each judges liveness if it becomes leader)."""

        async def one(address: str) -> tuple[str, str]:
            try:
                reply = await self.stub(address).Heartbeat(heartbeat, timeout=self.timeout)
                return address, reply.code
            except grpc.aio.AioRpcError as exc:
                return address, exc.code().name

        return dict(await asyncio.gather(*(one(a) for a in self.addresses)))

    async def watch_roles(
        self, address: str, group: str, broker_id: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Role changes of ``group`` pushed by one member (the stream is also the
        broker's liveness channel to that member)."""
        call = self.stub(address).WatchRoles(
            cpb.WatchRolesRequest(group=group, broker_id=broker_id)
        )
        async for change in call:
            yield json.loads(change.json)
