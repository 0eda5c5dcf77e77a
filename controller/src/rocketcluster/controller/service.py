"""ControllerServicer: the controller's gRPC API (Raft between members, and brokers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.generated import controller_pb2_grpc
from rocketcluster.controller.core import ControllerCore, Reply
from rocketcluster.controller.election import BrokerLiveInfo
from rocketcluster.controller.raft.transport import decode

log = logging.getLogger(__name__)


def to_pb(reply: Reply) -> cpb.ControllerReply:
    return cpb.ControllerReply(
        code=str(reply.code),
        message=reply.message,
        leader=reply.leader,
        json=json.dumps(reply.data) if reply.data is not None else "",
    )


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, core: ControllerCore) -> None:
        self._core = core

    async def Raft(self, request: cpb.RaftBatch, context: Any) -> cpb.RaftAck:
        """Step each message; a batch that does not decode (a kind no member sends), or
        that is not from a member to this member, is refused whole with
        INVALID_ARGUMENT — a stranger must not become the leader this member follows.
        What fits but is stale (an old term) the node drops, as Raft does."""
        config = self._core.config
        members = {m.id for m in config.members}
        try:
            messages = [decode(m) for m in request.messages]
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad raft message: {exc}")
        for message in messages:
            if message.from_id not in members or message.to != config.node_id:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"raft message from {message.from_id} to {message.to}: this is member "
                    f"{config.node_id} of {sorted(members)}",
                )
        node = self._core.node
        for message in messages:
            node.step(message)
        return cpb.RaftAck()

    async def ApplyBrokerId(self, r: cpb.ApplyBrokerIdRequest, context: Any) -> cpb.ControllerReply:
        return to_pb(
            await self._core.apply_broker_id(
                r.cluster, r.group, r.broker_id, r.address, r.check_code
            )
        )

    async def RegisterBroker(
        self, r: cpb.RegisterBrokerRequest, context: Any
    ) -> cpb.ControllerReply:
        return to_pb(
            await self._core.register_broker(
                r.cluster, r.group, r.broker_id, r.address, r.client_endpoint
            )
        )

    async def Heartbeat(self, r: cpb.BrokerHeartbeat, context: Any) -> cpb.ControllerReply:
        info = BrokerLiveInfo(
            r.broker_id,
            epoch=r.epoch,
            max_offset=r.max_offset,
            confirm_offset=r.confirm_offset,
            priority=r.election_priority,
            seen_master_epoch=r.seen_master_epoch,
        )
        return to_pb(self._core.heartbeat(r.group, info, r.address, r.timeout_ms))

    async def AlterSyncStateSet(
        self, r: cpb.AlterSyncStateSetRequest, context: Any
    ) -> cpb.ControllerReply:
        return to_pb(
            await self._core.alter_sync_state_set(
                r.group, r.master_id, r.master_epoch, r.sync_state_set_epoch, list(r.sync_state_set)
            )
        )

    async def ElectMaster(self, r: cpb.ElectMasterRequest, context: Any) -> cpb.ControllerReply:
        broker = r.broker_id if r.broker_id >= 0 else None
        reason = r.reason or ("designated by an admin" if r.designated else "nominated by a broker")
        return to_pb(await self._core.elect_master(r.group, broker, r.designated, reason))

    async def GetReplicaInfo(
        self, r: cpb.GetReplicaInfoRequest, context: Any
    ) -> cpb.ControllerReply:
        return to_pb(self._core.replica_info(r.group))

    async def PutRoute(self, r: cpb.RouteRequest, context: Any) -> cpb.ControllerReply:
        return to_pb(
            await self._core.put_route(r.topic, r.queues, r.message_type, list(r.groups), r.delete)
        )

    async def GetCatalogue(self, r: cpb.GetCatalogueRequest, context: Any) -> cpb.ControllerReply:
        return to_pb(self._core.catalogue(r.known_version))

    async def WatchRoles(
        self, r: cpb.WatchRolesRequest, context: Any
    ) -> AsyncIterator[cpb.RoleChange]:
        queue = self._core.watch(r.group, r.broker_id)
        try:
            while True:
                view = await queue.get()
                yield cpb.RoleChange(json=json.dumps(view))
        except asyncio.CancelledError:
            raise
        finally:
            with contextlib.suppress(Exception):
                self._core.unwatch(r.group, r.broker_id, queue)
