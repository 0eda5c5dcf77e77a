"""ControllerCore: requests in, Raft-replicated commands out, answers back.

Only the leader takes requests (others answer CONTROLLER_NOT_LEADER with the leader's
address). What needs liveness — who is alive, who should win — is decided here on the
leader and put into the command; the state machine then checks the command against
the epochs it was based on. An election scan on the leader elects a master for every
group that has none or whose master is dead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.api.tls import ClientTls
from rocketcluster.controller.election import (
    BrokerLiveInfo,
    ElectionDecision,
    decide,
    designated_lacks,
    fenced,
)
from rocketcluster.controller.groups_watch import ChangeSignal
from rocketcluster.controller.handover import (
    GrpcHandoverClient,
    HandoverAnswer,
    HandoverClient,
    handover_refusal,
)
from rocketcluster.controller.heartbeats import BrokerLiveness
from rocketcluster.controller.raft.errors import ProposalDroppedError, RaftError
from rocketcluster.controller.raft.node import ProposalLost, RaftNode
from rocketcluster.controller.state import BrokerGroup, ControllerCode, ReplicasState, Result

log = logging.getLogger(__name__)

PROPOSE_TIMEOUT_S = 5.0
TRANSFER_WAIT_S = 5.0
FENCE_WAIT_S = 2.0


@dataclass(frozen=True)
class Reply:
    code: str
    message: str = ""
    leader: str = ""
    data: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.code == ControllerCode.SUCCESS


class ReplicasMachine:
    """The Raft state machine: JSON commands applied to ReplicasState."""

    def __init__(self, on_group_changed: Any) -> None:
        self.state = ReplicasState()
        self._on_group_changed = on_group_changed

    def apply(self, index: int, data: bytes) -> Result:
        envelope = json.loads(data)
        command = envelope["cmd"]
        before = self._view(command.get("group", ""))
        result = self.state.apply(index, command, int(envelope.get("time", 0)))
        after = self._view(command.get("group", ""))
        if after is not None and after != before:
            self._on_group_changed(command["group"], after)
        return result

    def _view(self, group: str) -> dict[str, Any] | None:
        g = self.state.groups.get(group)
        return None if g is None else g.view()

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state = ReplicasState.restore(data)
        for name, group in self.state.groups.items():
            self._on_group_changed(name, group.view())


class ControllerCore:
    def __init__(self, config: ControllerProcessConfig, node_factory: Any) -> None:
        self.config = config
        self.liveness = BrokerLiveness()
        # Before the node: a Raft node made on a data directory with a snapshot
        # restores it at once, and the restore tells every group's watchers (a
        # controller restarted after its first snapshot crashed here, every time,
        # until the chaos soak found it).
        self._watchers: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        # Long polls of the groups' views (GET /v1/watch/groups): woken by any group's
        # change and by this member's leadership changing.
        self.groups_watch = ChangeSignal()
        self.machine = ReplicasMachine(self._group_changed)
        self.node: RaftNode = node_factory(self.machine)
        # One election at a time per group (a switchover's phase 0 waits seconds for a
        # slave to catch up; other groups' failovers must not wait behind it).
        self._election_locks: dict[str, asyncio.Lock] = {}
        self.handover: HandoverClient = GrpcHandoverClient(tls=ClientTls.of(config.tls))
        self._scan_task: asyncio.Task[None] | None = None
        self.elections = 0
        self.unclean_elections = 0

    @property
    def state(self) -> ReplicasState:
        return self.machine.state

    def start(self) -> None:
        self._scan_task = asyncio.get_running_loop().create_task(self._scan(), name="election-scan")

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()

    # -- leadership ----------------------------------------------------------------

    def leader_address(self) -> str:
        leader = self.node.leader_id
        if leader is None:
            return ""
        return self.config.member(leader).raft_address

    def leader_admin_address(self) -> str:
        leader = self.node.leader_id
        return "" if leader is None else self.config.member(leader).admin_address

    def _not_leader(self) -> Reply:
        leader = self.leader_address()
        why = (
            f"this member is not the leader; the leader is {leader}"
            if leader
            else "no leader elected yet"
        )
        return Reply(ControllerCode.CONTROLLER_NOT_LEADER, why, leader)

    async def propose(self, command: dict[str, Any]) -> Reply:
        if not self.node.is_leader:
            return self._not_leader()
        command = {**command, "requestId": uuid.uuid4().hex}
        data = json.dumps({"cmd": command, "time": int(time.time() * 1000)}).encode()
        try:
            result: Result = await self.node.propose(data, PROPOSE_TIMEOUT_S)
        except ProposalDroppedError:
            return self._not_leader()
        except ProposalLost as exc:
            return Reply(ControllerCode.CONTROLLER_NOT_LEADER, str(exc), self.leader_address())
        except TimeoutError:
            return Reply(
                ControllerCode.CONTROLLER_NOT_LEADER,
                "the command did not commit in time (leadership may be moving); retry",
                self.leader_address(),
            )
        return Reply(result.code, result.message, "", result.data)

    # -- broker requests -----------------------------------------------------------

    async def apply_broker_id(
        self, cluster: str, group: str, broker_id: int, address: str, check_code: str
    ) -> Reply:
        return await self.propose(
            {
                "type": "ApplyBrokerId",
                "cluster": cluster,
                "group": group,
                "brokerId": broker_id,
                "address": address,
                "checkCode": check_code,
            }
        )

    async def register_broker(
        self, cluster: str, group: str, broker_id: int, address: str, client_endpoint: str = ""
    ) -> Reply:
        """``client_endpoint`` (when given) becomes the group's endpoint in the catalogue."""
        command: dict[str, Any] = {
            "type": "RegisterBroker",
            "cluster": cluster,
            "group": group,
            "brokerId": broker_id,
            "address": address,
        }
        if client_endpoint:
            command["clientEndpoint"] = client_endpoint
        return await self.propose(command)

    def heartbeat(self, group: str, info: BrokerLiveInfo, address: str, timeout_ms: int) -> Reply:
        self.liveness.heartbeat(
            group, info, address, timeout_ms or self.config.broker_heartbeat_timeout_ms
        )
        return Reply(ControllerCode.SUCCESS, "", self.leader_address())

    async def alter_sync_state_set(
        self, group: str, master_id: int, master_epoch: int, set_epoch: int, new_set: list[int]
    ) -> Reply:
        if not self.node.is_leader:
            return self._not_leader()
        dead = [b for b in new_set if not self.liveness.is_alive(group, b)]
        return await self.propose(
            {
                "type": "AlterSyncStateSet",
                "group": group,
                "masterId": master_id,
                "masterEpoch": master_epoch,
                "syncStateSetEpoch": set_epoch,
                "syncStateSet": new_set,
                "notAlive": dead,
            }
        )

    async def elect_master(
        self, group: str, broker_id: int | None, designated: bool, reason: str
    ) -> Reply:
        """An election now: a broker nominating itself, an admin's switchover, or the
        scan. Serialized per group, so two elections never race on the same master epoch.

        Both a failover and a switchover run in two phases: the master is deposed
        (a new master epoch, no master), and only replicas that report having acted
        on that view — their offsets final, no write of the old master can still
        reach them — are compared and elected. A switchover away from an alive master
        starts with phase 0 (``handover.py``): the master pauses its appends until
        the designated slave holds its whole log, or the switchover is refused and
        nobody is deposed."""
        if not self.node.is_leader:
            return self._not_leader()
        async with self._election_locks.setdefault(group, asyncio.Lock()):
            g = self.state.groups.get(group)
            if g is None:
                return Reply(
                    ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                    f"no broker group {group!r}",
                )
            target = broker_id if designated else None
            alive = self.liveness.alive_in(group)
            decision = self._decide(g, alive, target)
            if target is not None and not decision.elect:
                return Reply(decision.code, decision.reason, "", g.view())  # refused as asked
            deposed = g.master_id
            handover: HandoverAnswer | None = None
            if target is not None and deposed is not None and deposed in alive:
                handover = await self._prepare_handover(g, deposed, target)
                refused = handover_refusal(handover, deposed, target)
                if refused:
                    log.info("group %s: switchover to %d refused: %s", group, target, refused)
                    return Reply(
                        ControllerCode.CONTROLLER_ELECT_MASTER_FAILED,
                        f"switchover to broker {target} refused: {refused}",
                        "",
                        self.state.groups[group].view(),
                    )
            if deposed is not None and (target is not None or deposed not in alive):
                reply = await self._depose(group, deposed, g.master_epoch, reason)
                if reply.code != ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE:
                    if handover is not None and handover.caught_up and target is not None:
                        await self._abort_handover(g, deposed, target)
                    return reply  # not leader any more, or another election won
                g = self.state.groups[group]
            refusal = ""
            if g.master_id is None and g.master_epoch > 0:
                members = set(g.sync_state_set) | ({target} if target is not None else set())
                alive = await self._fenced_candidates(group, members, g.master_epoch)
                decision = self._decide(g, alive, target)
                if target is not None:
                    in_set = target in g.sync_state_set
                    refusal = designated_lacks(g, alive, target, deposed) if in_set else ""
                    if refusal or not decision.elect:
                        # The master is deposed already: elect as a failover would.
                        refusal = refusal or decision.reason
                        decision = self._decide(g, alive, None)
            no_change = decision.new_master is None and g.master_id is None
            if not decision.elect or no_change:
                why = f"{refusal}; {decision.reason}" if refusal else decision.reason
                return Reply(decision.code, why, "", g.view())
            reply = await self.propose(
                {
                    "type": "ElectMaster",
                    "group": group,
                    "masterEpoch": g.master_epoch,
                    "newMaster": decision.new_master,
                    "unclean": decision.unclean,
                    "reason": f"{reason}: {decision.reason}"
                    + (f" (switchover to {broker_id} refused: {refusal})" if refusal else ""),
                }
            )
            if reply.code in (
                ControllerCode.SUCCESS,
                ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE,
            ):
                self.elections += 1
                self.unclean_elections += int(decision.unclean and reply.ok)
                log.info(
                    "group %s: %s -> master %s (%s)",
                    group,
                    reason,
                    decision.new_master,
                    decision.reason,
                )
            if refusal and reply.ok:
                return Reply(
                    ControllerCode.CONTROLLER_ELECT_MASTER_FAILED,
                    f"switchover to broker {broker_id} refused: {refusal}; "
                    f"broker {decision.new_master} elected instead",
                    "",
                    reply.data,
                )
            return reply

    async def _prepare_handover(self, g: BrokerGroup, master: int, target: int) -> HandoverAnswer:
        """Phase 0: ask the alive master to hand over to ``target`` (see handover.py)."""
        address = split_registered(g.replicas[master].address)[1]
        answer = await self.handover.prepare(address, g.name, g.master_epoch, target)
        log.info("group %s: handover %d -> %d: %s", g.name, master, target, answer)
        return answer

    async def _abort_handover(self, g: BrokerGroup, master: int, target: int) -> None:
        """The master was not deposed after all: let it resume its appends now rather
        than at the end of its hold (best effort: the hold bounds the pause anyway)."""
        try:
            await self.handover.abort(
                split_registered(g.replicas[master].address)[1], g.name, g.master_epoch, target
            )
        except Exception as exc:
            log.info("group %s: aborting the handover on %d failed: %s", g.name, master, exc)

    def _decide(
        self, g: BrokerGroup, alive: dict[int, BrokerLiveInfo], designated: int | None
    ) -> ElectionDecision:
        return decide(
            g,
            alive,
            designated=designated,
            unclean_enabled=self.config.unclean_election,
            write_quorum=self.config.write_quorum,
        )

    async def _depose(self, group: str, master: int, epoch: int, reason: str) -> Reply:
        """Phase one of an election: the group has no master from here on (a new
        master epoch). Every broker that applies this view stops replicating from the
        old master, then reports its final offset with the new epoch (``fenced``)."""
        reply = await self.propose(
            {
                "type": "ElectMaster",
                "group": group,
                "masterEpoch": epoch,
                "newMaster": None,
                "reason": f"{reason}: master {master} deposed, fencing its replicas",
            }
        )
        if reply.code == ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE:
            log.info("group %s: %s -> master %d deposed (epoch %d)", group, reason, master, epoch)
        return reply

    async def _fenced_candidates(
        self, group: str, members: set[int], master_epoch: int
    ) -> dict[int, BrokerLiveInfo]:
        """Phase two: wait (briefly) until every alive in-sync replica has reported
        that it acted on the view of ``master_epoch``; the brokers heartbeat at once
        when a view arrives. Returns the fenced alive brokers — the only ones an
        election may compare and choose (see ``election.fenced``)."""
        deadline = self.liveness.now() + FENCE_WAIT_S
        while True:
            alive = self.liveness.alive_in(group)
            ready = fenced(alive, master_epoch)
            waiting = [b for b in members if b in alive and b not in ready]
            if not waiting or self.liveness.now() >= deadline:
                return ready
            await asyncio.sleep(0.02)

    def replica_info(self, group: str) -> Reply:
        if not self.node.is_leader:
            return self._not_leader()
        g = self.state.groups.get(group)
        if g is None:
            return Reply(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no broker group {group!r}"
            )
        return Reply(ControllerCode.SUCCESS, "", "", g.view())

    async def put_route(
        self, topic: str, queues: int, message_type: str, groups: list[str], delete: bool
    ) -> Reply:
        if delete:
            return await self.propose({"type": "DeleteRoute", "topic": topic})
        return await self.propose(
            {
                "type": "PutRoute",
                "topic": topic,
                "queues": queues,
                "messageType": message_type,
                "groups": groups,
            }
        )

    # -- the catalogue and Raft leadership (admin requests) ---------------------------

    def catalogue(self, known_version: int) -> Reply:
        """The catalogue for brokers (leader only, as every broker request); no data
        while ``known_version`` is current, so polling an unchanged catalogue is cheap."""
        if not self.node.is_leader:
            return self._not_leader()
        if known_version == self.state.catalogue_version:
            return Reply(ControllerCode.SUCCESS, "unchanged")
        return Reply(ControllerCode.SUCCESS, "", "", self.state.catalogue())

    async def put_topic(self, spec: dict[str, Any]) -> Reply:
        return await self.propose({"type": "PutTopic", "spec": spec})

    async def delete_topic(self, name: str) -> Reply:
        return await self.propose({"type": "DeleteTopic", "name": name})

    async def put_consumer_group(self, spec: dict[str, Any]) -> Reply:
        return await self.propose({"type": "PutConsumerGroup", "spec": spec})

    async def put_entries(
        self, topics: list[dict[str, Any]], consumer_groups: list[dict[str, Any]]
    ) -> Reply:
        return await self.propose(
            {"type": "PutCatalogueEntries", "topics": topics, "consumerGroups": consumer_groups}
        )

    async def delete_consumer_group(self, name: str) -> Reply:
        return await self.propose({"type": "DeleteConsumerGroup", "name": name})

    async def set_group_writable(self, group: str, writable: bool) -> Reply:
        return await self.propose(
            {"type": "SetGroupWritable", "group": group, "writable": writable}
        )

    async def forget_group(self, group: str) -> Reply:
        """Forget a removed group; refused while this leader hears any of its brokers,
        which would go on serving (and registering) a group the catalogue no longer has."""
        if not self.node.is_leader:
            return self._not_leader()
        if group not in self.state.groups:
            return Reply(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no broker group {group!r}"
            )
        alive = sorted(self.liveness.alive_in(group))
        if alive:
            return Reply(
                ControllerCode.CONTROLLER_BROKER_STILL_ALIVE,
                f"broker(s) {', '.join(map(str, alive))} of group {group} are still alive "
                "(they heartbeat the controllers): stop them first, then forget the group",
            )
        return await self.propose(
            {"type": "ForgetGroup", "group": group, "reason": "the group was removed"}
        )

    async def transfer_leadership(self, to: int | None, wait_s: float = TRANSFER_WAIT_S) -> Reply:
        """Hand Raft leadership to member ``to`` (None: the most caught-up follower) and
        wait until it leads: a rolling restart moves leadership off a member before it
        restarts it, so no request waits out an election timeout."""
        if not self.node.is_leader:
            return self._not_leader()
        me = self.config.node_id
        members = sorted(m.id for m in self.config.members)
        if to is None:
            progress = self.node.raw.status().progress
            to = max(
                (m for m in progress if m != me),
                key=lambda m: (progress[m].state == "replicate", progress[m].match, -m),
                default=None,
            )
            if to is None:
                return Reply(
                    ControllerCode.CONTROLLER_TRANSFER_FAILED,
                    f"member {me} is the only controller member: nobody can take over",
                )
        elif to not in members:
            return Reply(
                ControllerCode.CONTROLLER_INVALID_REQUEST,
                f"member {to} is not a controller member (the members are {members})",
            )
        elif to == me:
            return Reply(ControllerCode.SUCCESS, f"member {me} leads already", "", {"leader": me})
        try:
            self.node.transfer_leadership(to)
        except RaftError as exc:
            return Reply(
                ControllerCode.CONTROLLER_TRANSFER_FAILED, f"cannot hand over to {to}: {exc}"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (leader := self.node.leader_id) != to:
            if leader not in (None, me):
                return Reply(
                    ControllerCode.CONTROLLER_TRANSFER_FAILED,
                    f"member {leader} won the election instead of member {to}; retry to move it",
                    self.leader_address(),
                )
            if loop.time() >= deadline:
                now = f"member {me} still leads" if leader == me else "no member leads yet"
                return Reply(
                    ControllerCode.CONTROLLER_TRANSFER_TIMEOUT,
                    f"member {to} did not take over within {wait_s:g} s ({now}); check that it "
                    "runs and is caught up (GET /v1/cluster on it), then retry",
                    self.leader_address(),
                )
            await asyncio.sleep(0.02)
        log.info("raft leadership handed from member %d to member %d", me, to)
        return Reply(
            ControllerCode.SUCCESS,
            f"member {to} leads now (was member {me})",
            self.leader_address(),
            {"leader": to, "previous": me},
        )

    # -- role watchers --------------------------------------------------------------

    def watch(self, group: str, broker_id: int) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._watchers.setdefault(group, set()).add(queue)
        self.liveness.channel_opened(group, broker_id)
        g = self.state.groups.get(group)
        if g is not None:
            queue.put_nowait(g.view())
        return queue

    def unwatch(self, group: str, broker_id: int, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._watchers.get(group, set()).discard(queue)
        self.liveness.channel_closed(group, broker_id)
        g = self.state.groups.get(group)
        if g is not None and g.master_id == broker_id and self.node.is_leader:
            # The master's channel broke: elect now rather than at the next scan.
            asyncio.get_running_loop().create_task(
                self.elect_master(group, None, False, f"master {broker_id} lost its channel")
            )

    def _group_changed(self, group: str, view: dict[str, Any]) -> None:
        for queue in self._watchers.get(group, ()):
            queue.put_nowait(view)
        self.groups_watch.notify()

    def leadership_changed(self) -> None:
        """Raft's soft state moved: a held long poll re-checks whether it still asks
        the leader."""
        self.groups_watch.notify()

    def group_views(self) -> list[dict[str, Any]]:
        return [g.view() for _, g in sorted(self.state.groups.items())]

    # -- the election scan ---------------------------------------------------------

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.config.election_scan_ms / 1000)
            if not self.node.is_leader:
                continue
            for name, g in list(self.state.groups.items()):
                if not g.replicas:
                    continue
                if g.master_id is not None and self.liveness.is_alive(name, g.master_id):
                    continue
                alive = self.liveness.alive_in(name)
                if not alive:
                    continue  # nobody to elect; keep the state as it is
                why = "no master" if g.master_id is None else f"master {g.master_id} is dead"
                try:
                    await self.elect_master(name, None, False, why)
                except Exception:
                    log.exception("election scan of %s failed", name)
