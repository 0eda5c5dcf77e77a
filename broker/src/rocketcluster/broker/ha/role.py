"""RoleManager: a broker in a replicated group, talking to the controllers.

At start: get a broker id (ApplyBrokerId with a check code kept in the store's
metadata, so a crash at any step retries the same application), register, then
heartbeat every controller and watch role changes from each. The controller's view
of the group decides the role:

- master (this broker, a newer master epoch): stop replicating, append
  ⟨epoch, max offset⟩ to the epoch file, raise the confirm offset to the max offset
  (consume queues complete), then accept writes;
- slave: refuse writes at once, replicate from the master;
- no master: refuse writes and nominate itself.

Without controllers answering, the broker keeps its last known role.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from rocketcluster.api.broker_config import (
    BrokerProcessConfig,
    registered_address,
    split_registered,
)
from rocketcluster.api.client.controller import ControllerClient, ControllerUnavailable
from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.tls import ClientTls
from rocketcluster.broker.ha.epoch import EpochFileCache
from rocketcluster.broker.ha.handover import HandoverService
from rocketcluster.broker.ha.master import GroupView, HAMaster
from rocketcluster.broker.ha.slave import HASlave
from rocketcluster.broker.store import MessageStore

log = logging.getLogger(__name__)

IDENTITY_KEY = "ha/identity"
HEARTBEAT_S = 1.0
POLL_S = 2.0
NOMINATE_EVERY_S = 1.0


class Role:
    STARTING = "starting"
    MASTER = "master"
    SLAVE = "slave"
    NO_MASTER = "no-master"


class RoleManager:
    def __init__(
        self,
        config: BrokerProcessConfig,
        store: MessageStore,
        on_metadata: Callable[[dict[str, Any]], None],
        metadata_snapshot: Callable[[], dict[str, Any]],
        on_role: Callable[[str], None],
    ) -> None:
        self.config = config
        self.store = store
        self.tls = ClientTls.of(config.tls)
        self.client = ControllerClient(config.controllers, timeout=2.0, attempts=20, tls=self.tls)
        self.epochs = EpochFileCache(config.data_dir / "store" / "epochs.json")
        self.role = Role.STARTING
        self.broker_id = 0
        self.view: dict[str, Any] | None = None
        self.master_client_endpoint = ""
        self._on_metadata = on_metadata
        self._metadata_snapshot = metadata_snapshot
        self._on_role = on_role
        self.ha_master: HAMaster | None = None
        self._slave: HASlave | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last_nomination = 0.0
        self._transition = asyncio.Lock()
        # The master epoch of the newest view acted on; heartbeats carry it (and the
        # controllers elect only brokers that report the deposing view's epoch).
        self.seen_master_epoch = 0
        self.handover = HandoverService(self)

    @property
    def address(self) -> str:
        ha = f"{self.config.advertised_host}:{self.config.ha_port}"
        return registered_address(self.config.client_endpoint, ha)

    def is_master(self) -> bool:
        return self.role == Role.MASTER

    # -- start -------------------------------------------------------------------

    async def start(self) -> None:
        self.broker_id = await self._apply_id()
        self.ha_master = HAMaster(
            self.store,
            self.epochs,
            self.broker_id,
            self.config.replication,
            self._alter_sync_state_set,
            self._metadata_snapshot,
            max_time_not_catchup_s=self.config.ha.max_time_not_catchup_ms / 1000,
            ack_timeout_s=self.config.ha.ack_timeout_ms / 1000,
        )
        answer = await self.client.register_broker(
            self.config.cluster,
            self.config.group,
            self.broker_id,
            self.address,
            client_endpoint=self.config.route_endpoint,  # the catalogue's endpoint for routes
        )
        if not answer.ok:
            raise RuntimeError(
                f"registering with the controller failed: {answer.code} {answer.message}"
            )
        self.store.writable = False
        await self._heartbeat()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeats(), name="controller-heartbeats")]
        self._tasks += [
            loop.create_task(self._watch(address), name=f"watch-{address}")
            for address in self.config.controllers
        ]
        self._tasks.append(loop.create_task(self._poll(), name="role-poll"))
        if answer.data:
            await self.on_view(answer.data)

    async def _apply_id(self) -> int:
        metadata = self.store.metadata
        saved = metadata.get_value(IDENTITY_KEY)
        identity: dict[str, Any]
        if isinstance(saved, dict):
            identity = saved
        else:
            identity = {
                "checkCode": f"{self.config.advertised_host}-{uuid.uuid4().hex}",
                "brokerId": 0,
            }
            metadata.put_value(IDENTITY_KEY, identity)  # before asking: a retry reuses it
        known = identity.get("brokerId")
        candidates = [int(known)] if known else list(range(1, 64))
        for candidate in candidates:
            answer = await self.client.apply_broker_id(
                self.config.cluster,
                self.config.group,
                candidate,
                self.address,
                str(identity["checkCode"]),
            )
            if answer.ok and answer.data:
                broker_id = int(answer.data["brokerId"])
                if identity.get("brokerId") != broker_id:
                    metadata.put_value(IDENTITY_KEY, {**identity, "brokerId": broker_id})
                log.info("broker id %d in group %s", broker_id, self.config.group)
                return broker_id
        raise RuntimeError(f"no broker id could be applied for in group {self.config.group}")

    async def stop(self) -> None:
        self.handover.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._slave is not None:
            await self._slave.stop()
        if self.ha_master is not None:
            await self.ha_master.close()
        await self.client.close()

    # -- heartbeats and views ------------------------------------------------------

    async def _heartbeat(self) -> None:
        clog = self.store.commitlog
        await self.client.heartbeat_all(
            cpb.BrokerHeartbeat(
                cluster=self.config.cluster,
                group=self.config.group,
                broker_id=self.broker_id,
                address=self.address,
                epoch=self.epochs.last_epoch,
                max_offset=clog.write_offset,
                confirm_offset=self.store.confirm_offset or 0,
                election_priority=self.broker_id,
                timeout_ms=self.config.ha.controller_heartbeat_timeout_ms,
                seen_master_epoch=self.seen_master_epoch,
            )
        )

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(
                min(HEARTBEAT_S, self.config.ha.controller_heartbeat_timeout_ms / 3000)
            )
            with contextlib.suppress(Exception):
                await self._heartbeat()

    async def _watch(self, address: str) -> None:
        while True:
            try:
                async for view in self.client.watch_roles(
                    address, self.config.group, self.broker_id
                ):
                    await self.on_view(view)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("role watch on %s ended: %s", address, exc)
            await asyncio.sleep(0.3)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                answer = await self.client.replica_info(self.config.group)
            except ControllerUnavailable:
                continue  # no controller: keep the last known role
            if answer.ok and answer.data:
                await self.on_view(answer.data)
            if self.role == Role.NO_MASTER:
                await self._nominate()

    async def on_view(self, view: dict[str, Any]) -> None:
        async with self._transition:
            current = self.view
            key = (view["masterEpoch"], view["syncStateSetEpoch"])
            if current is not None and key < (current["masterEpoch"], current["syncStateSetEpoch"]):
                return  # a stale view from a lagging member
            self.view = view
            master = view["masterId"]
            if master == self.broker_id:
                group_view = GroupView(
                    master,
                    view["masterEpoch"],
                    set(view["syncStateSet"]),
                    view["syncStateSetEpoch"],
                )
                if self.role != Role.MASTER or (
                    current and current["masterEpoch"] != view["masterEpoch"]
                ):
                    await self._become_master(group_view)
                elif self.ha_master is not None:
                    self.ha_master.update_view(group_view)
            elif master is None:
                await self._become_no_master(view["masterEpoch"])
                return
            else:
                await self._become_slave(view["replicas"][str(master)])
            self._acted_on(view["masterEpoch"])

    def _acted_on(self, master_epoch: int) -> None:
        """The view of ``master_epoch`` is in force here (replication from any older
        master stopped): say so to the controllers now, with the offsets as they are."""
        if master_epoch > self.seen_master_epoch:
            self.seen_master_epoch = master_epoch
            asyncio.get_running_loop().create_task(self._heartbeat_quietly())

    async def _heartbeat_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self._heartbeat()

    async def _become_master(self, view: GroupView) -> None:
        if self._slave is not None:
            await self._slave.stop()
            self._slave = None
        self.epochs.append(view.master_epoch, self.store.commitlog.write_offset)
        assert self.ha_master is not None
        self.ha_master.activate(view)  # confirm offset := max offset: queues complete
        await asyncio.sleep(0)  # let the dispatch run before the first write
        self.store.writable = True
        self.master_client_endpoint = self.config.client_endpoint
        self._set_role(Role.MASTER)
        log.info(
            "now master of %s at epoch %d (log end %d)",
            self.config.group,
            view.master_epoch,
            self.store.commitlog.write_offset,
        )

    async def _become_slave(self, registered: str) -> None:
        client, ha = split_registered(registered)
        self.store.writable = False
        if self.ha_master is not None:
            self.ha_master.deactivate()
        self.master_client_endpoint = client
        if self._slave is None or self._slave.master_address != ha:
            if self._slave is not None:
                await self._slave.stop()
            self._slave = HASlave(
                self.store,
                self.epochs,
                self.config.group,
                self.broker_id,
                ha,
                self._on_metadata,
                self.tls,
            )
            self._slave.start()
        if self.role != Role.SLAVE:
            self._set_role(Role.SLAVE)
            log.info("now slave of %s, replicating from %s", self.config.group, ha)

    async def _become_no_master(self, master_epoch: int) -> None:
        self.store.writable = False
        if self.ha_master is not None:
            self.ha_master.deactivate()
        if self._slave is not None:
            await self._slave.stop()
            self._slave = None
        self.master_client_endpoint = ""
        if self.role != Role.NO_MASTER:
            self._set_role(Role.NO_MASTER)
        self._acted_on(master_epoch)  # fenced: this log no longer grows from the old master
        await self._nominate()

    async def _nominate(self) -> None:
        now = time.monotonic()
        if now - self._last_nomination < NOMINATE_EVERY_S:
            return
        self._last_nomination = now
        with contextlib.suppress(Exception):
            await self._heartbeat()
            await self.client.elect_master(
                self.config.group, self.broker_id, reason="no master: self-nomination"
            )

    def _set_role(self, role: str) -> None:
        self.role = role
        self._on_role(role)
        self.handover.role_changed()

    async def _alter_sync_state_set(
        self, members: list[int], master_epoch: int, set_epoch: int, master_id: int
    ) -> tuple[bool, dict[str, Any] | None]:
        try:
            answer = await self.client.alter_sync_state_set(
                self.config.group, master_id, master_epoch, set_epoch, members
            )
        except ControllerUnavailable:
            return False, None
        if not answer.ok:
            log.info("AlterSyncStateSet %s refused: %s %s", members, answer.code, answer.message)
        return answer.ok, answer.data

    def replicating(self) -> bool:
        """Following a master that accepted this broker's replication stream."""
        return bool(self._slave and self._slave.connected)

    def received_bytes(self) -> int:
        return self._slave.received_bytes if self._slave else 0

    def status(self) -> dict[str, Any]:
        ha = self.ha_master
        slave = self._slave
        now = time.monotonic()
        return {
            "role": self.role,
            "brokerId": self.broker_id,
            "view": self.view,
            "epochs": [list(e) for e in self.epochs.entries],
            "masterClientEndpoint": self.master_client_endpoint,
            "confirmOffset": self.store.confirm_offset,
            "slaves": {
                str(s.broker_id): {
                    "ackOffset": s.ack_offset,
                    "connected": s.connected,
                    # when it last held all the master had: the operator's proof that a
                    # restarted slave caught up since it came back
                    "caughtUpAgoSeconds": round(now - s.caught_up_at, 3)
                    if s.caught_up_at
                    else None,
                }
                for s in (ha.slaves.values() if ha else [])
            },
            "replicating": bool(slave and slave.connected),
            "inSync": sorted(ha.in_sync()) if ha and ha.active else [],
            "handover": self.handover.status(),
        }
