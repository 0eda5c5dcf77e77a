"""Phase 0 of a switchover: the master hands over before it is deposed.

Deposing first and then comparing fenced offsets refused a switchover under load
now and then (the designated slave was a few records behind another slave at the
moment of fencing; measured: 1 in 8). So the leader first asks the alive master
(ha.proto PrepareHandover) to pause its appends and wait until the designated slave
holds its whole log; only a master that answers caught up is deposed, and the slave
then holds everything any replica holds, so it wins the fenced election. A master
that cannot get there answers with the numbers and stays master: the switchover is
refused without deposing anyone. A dead master is not asked (the election proceeds
as a failover would), nor is a broker too old to know the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import grpc

from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.api.generated.ha_pb2_grpc import HAServiceStub
from rocketcluster.api.tls import ClientTls, grpc_channel

CATCH_UP_S = 5.0  # how long the designated slave may take to catch up
HOLD_S = 5.0  # how long the master keeps appends paused, waiting to be deposed
RPC_MARGIN_S = 2.0


@dataclass(frozen=True)
class HandoverAnswer:
    """The master's answer to PrepareHandover (or why there was none)."""

    reached: bool
    caught_up: bool = False
    max_offset: int = 0
    target_ack_offset: int = 0
    waited_ms: int = 0
    refused: str = ""
    error: str = ""
    # A broker from before PrepareHandover: deposed and fenced as before.
    unimplemented: bool = False


class HandoverClient(Protocol):
    async def prepare(
        self, address: str, group: str, master_epoch: int, target: int
    ) -> HandoverAnswer: ...

    async def abort(self, address: str, group: str, master_epoch: int, target: int) -> None: ...


class GrpcHandoverClient:
    """One short-lived channel per call: switchovers are rare."""

    def __init__(
        self, catch_up_s: float = CATCH_UP_S, hold_s: float = HOLD_S, tls: ClientTls | None = None
    ) -> None:
        self.catch_up_s = catch_up_s
        self.hold_s = hold_s
        self.tls = tls  # brokers' HA port is mutual TLS when on

    def _request(self, group: str, master_epoch: int, target: int) -> hpb.HandoverRequest:
        return hpb.HandoverRequest(
            group=group,
            master_epoch=master_epoch,
            target_broker_id=target,
            timeout_ms=round(self.catch_up_s * 1000),
            hold_ms=round(self.hold_s * 1000),
        )

    async def prepare(
        self, address: str, group: str, master_epoch: int, target: int
    ) -> HandoverAnswer:
        request = self._request(group, master_epoch, target)
        try:
            async with grpc_channel(address, self.tls) as channel:
                reply = await HAServiceStub(channel).PrepareHandover(
                    request, timeout=self.catch_up_s + RPC_MARGIN_S
                )
        except grpc.aio.AioRpcError as exc:
            return HandoverAnswer(
                False,
                error=f"{exc.code().name}: {exc.details()}",
                unimplemented=exc.code() is grpc.StatusCode.UNIMPLEMENTED,
            )
        return HandoverAnswer(
            True,
            reply.caught_up,
            reply.max_offset,
            reply.target_ack_offset,
            reply.waited_ms,
            reply.refused,
        )

    async def abort(self, address: str, group: str, master_epoch: int, target: int) -> None:
        async with grpc_channel(address, self.tls) as channel:
            await HAServiceStub(channel).AbortHandover(
                self._request(group, master_epoch, target), timeout=RPC_MARGIN_S
            )


def handover_refusal(answer: HandoverAnswer, master: int, target: int) -> str:
    """Phase 0's decision: why the switchover is refused with ``master`` left in place,
    or "" to depose it and elect ``target``."""
    if answer.unimplemented:
        return ""  # an older broker: the fenced election decides, as before
    if not answer.reached:
        return (
            f"master {master} did not answer the handover request ({answer.error}); it stays "
            "master. Retry, or stop it for a failover"
        )
    if answer.refused:
        return f"master {master} refused the handover: {answer.refused}"
    if not answer.caught_up:
        behind = max(0, answer.max_offset - answer.target_ack_offset)
        return (
            f"broker {target} is {_size(behind)} behind after {answer.waited_ms / 1000:.1f} s "
            f"(it acknowledged offset {answer.target_ack_offset} of {answer.max_offset}); "
            f"master {master} stays master"
        )
    return ""


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1 << 20:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1 << 20):.1f} MB"
