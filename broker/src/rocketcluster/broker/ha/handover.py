"""HandoverService: the master's side of a graceful switchover (ha.proto PrepareHandover).

A switchover under load used to be refused now and then: the controller deposed the
master first and then found the designated slave a few records behind another slave.
Now the controller asks first. The master lets the target catch up with its log while
writes flow (a target that cannot — paused, far behind — is found without pausing
anything), then closes the store's write gate (every append — client sends, timers,
transactions, dead letters — waits there; nothing is failed), so its log end is
final, and waits for the target to acknowledge that end: about one replication round
trip. Caught up: the gate stays closed until this broker learns of the next master
(the requests waiting at the gate are then forwarded there) or the hold bound passes.
Not caught up (or the controller aborts): the gate opens at once and this broker
carries on as master.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.master import HAMaster
from rocketcluster.broker.store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 5000
DEFAULT_HOLD_MS = 5000
FINAL_CATCH_UP_MIN_S = 1.0
FOLLOW_POLL_S = 0.005
MAX_WAIT_MS = 30_000


class HandingRole(Protocol):
    """What a handover reads of the broker's role (the RoleManager, which owns the
    HandoverService and tells it of every role change)."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def config(self) -> BrokerProcessConfig: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def view(self) -> dict[str, Any] | None: ...
    @property
    def ha_master(self) -> HAMaster | None: ...
    @property
    def role(self) -> str: ...
    @property
    def master_client_endpoint(self) -> str: ...
    def is_master(self) -> bool: ...
    def replicating(self) -> bool: ...


class HandoverService:
    def __init__(self, role: HandingRole) -> None:
        self._role = role
        self._gate = role.store.write_gate
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._hold: asyncio.Task[None] | None = None
        self._paused_at = 0.0
        self.handed_over = 0
        self.not_caught_up = 0
        self.last_pause_ms = 0

    # -- the RPCs ----------------------------------------------------------------------

    async def prepare(self, request: hpb.HandoverRequest) -> hpb.HandoverReply:
        async with self._lock:  # a repeated request waits for the first one's answer
            return await self._prepare(request)

    async def _prepare(self, request: hpb.HandoverRequest) -> hpb.HandoverReply:
        clog = self._role.store.commitlog
        refused = self._refusal(request)
        if refused:
            return hpb.HandoverReply(refused=refused, max_offset=clog.write_offset)
        ha = self._role.ha_master
        assert ha is not None  # _refusal checked it is the active master
        target = request.target_broker_id
        self._stop_hold()  # a newer request replaces the hold in force; the gate stays shut
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + _bounded_ms(request.timeout_ms, DEFAULT_TIMEOUT_MS) / 1000
        # 1. Writes flowing: the target catches up with the log as it is now. A target
        # that cannot (paused, far behind) is found here, without pausing any write.
        end = clog.write_offset
        caught_up = await ha.wait_acked(target, end, deadline - loop.time())
        if caught_up:
            # 2. Writes paused: the log end is final; the target needs the last few
            # batches, so the pause lasts about one replication round trip.
            self._gate.close(f"handing over to broker {target}")
            self._paused_at = loop.time()
            end = clog.write_offset
            final_s = max(deadline - loop.time(), FINAL_CATCH_UP_MIN_S)
            caught_up = await ha.wait_acked(target, end, final_s)
        caught_up = caught_up and not self._refusal(request)  # still master of that epoch
        slave = ha.slaves.get(target)
        acked = slave.ack_offset if slave is not None else 0
        reply = hpb.HandoverReply(
            caught_up=caught_up,
            max_offset=end,
            target_ack_offset=acked,
            waited_ms=round((loop.time() - started) * 1000),
        )
        if not caught_up:
            self.not_caught_up += 1
            self._open()
            log.warning(
                "handover to broker %d abandoned: it acknowledged %d of %d after %.1f s; "
                "carrying on as master",
                target,
                acked,
                end,
                loop.time() - started,
            )
            return reply
        hold_s = _bounded_ms(request.hold_ms, DEFAULT_HOLD_MS) / 1000
        self._hold = loop.create_task(
            self._hold_until_handed_over(request.master_epoch, hold_s, target),
            name="handover-hold",
        )
        log.info(
            "handing over to broker %d: it holds the log up to %d; writes paused (at most %.1f s)",
            target,
            end,
            hold_s,
        )
        return reply

    async def abort(self, request: hpb.HandoverRequest) -> hpb.HandoverReply:
        """The controller gave up before deposing this master: writes go on."""
        async with self._lock:
            if self._hold is not None:
                self._stop_hold()
                self._open()
                log.info(
                    "handover to broker %d aborted by the controller", request.target_broker_id
                )
            return hpb.HandoverReply(max_offset=self._role.store.commitlog.write_offset)

    # -- the hold ---------------------------------------------------------------------

    def role_changed(self) -> None:
        """The role manager acted on a new view: a held handover may be complete."""
        self._changed.set()

    async def _hold_until_handed_over(self, master_epoch: int, hold_s: float, target: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold_s
        while not self._handed_over(master_epoch):
            left = deadline - loop.time()
            if left <= 0:
                log.warning(
                    "handover to broker %d: no new master within %.1f s; writes resume (%s)",
                    target,
                    hold_s,
                    self._role.role,
                )
                break
            self._changed.clear()
            if self._role.master_client_endpoint:
                left = min(left, FOLLOW_POLL_S)  # no event says when the handshake is done
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()
        else:
            self.handed_over += 1
        self._hold = None
        self._open()

    def _handed_over(self, master_epoch: int) -> bool:
        """Master again of a newer epoch, or a slave replicating from the new master:
        nothing is left to wait for. Replicating, not just knowing it: the new master
        answers the replication handshake only once it is active, so the requests
        forwarded from the gate never reach a broker still becoming master."""
        role = self._role
        if role.is_master():
            view = role.view
            return view is not None and int(view["masterEpoch"]) > master_epoch
        return bool(role.master_client_endpoint) and role.replicating()

    def _stop_hold(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.cancel()

    def close(self) -> None:
        """Shutting down: requests still waiting fail at once rather than hang."""
        self._stop_hold()
        self._open()

    def _open(self) -> None:
        if self._gate.closed:
            self.last_pause_ms = round((asyncio.get_running_loop().time() - self._paused_at) * 1000)
            log.info("writes resume after a pause of %d ms", self.last_pause_ms)
        self._gate.open()

    # -- checks -------------------------------------------------------------------------

    def _refusal(self, request: hpb.HandoverRequest) -> str:
        role = self._role
        ha = role.ha_master
        view = role.view
        group = role.config.group
        if request.group and request.group != group:
            return f"this broker serves group {group}, not {request.group}"
        if not role.is_master() or ha is None or not ha.active or view is None:
            return f"broker {role.broker_id} is not the master of {group}"
        if int(view["masterEpoch"]) != request.master_epoch:
            return (
                f"broker {role.broker_id} is master at epoch {view['masterEpoch']}, "
                f"not {request.master_epoch}"
            )
        if request.target_broker_id == role.broker_id:
            return f"broker {role.broker_id} is the master already"
        return ""

    def status(self) -> dict[str, object]:
        return {
            "writesPaused": self._gate.closed,
            "reason": self._gate.reason,
            "handedOver": self.handed_over,
            "notCaughtUp": self.not_caught_up,
            "lastPauseMs": self.last_pause_ms,
        }


def _bounded_ms(value: int, default: int) -> int:
    return min(value, MAX_WAIT_MS) if value > 0 else default
