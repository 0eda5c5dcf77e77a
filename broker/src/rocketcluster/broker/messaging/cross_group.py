"""CrossGroup: a receive that finds nothing here is answered by another broker group.

Why. An official client chooses the broker group of every receive itself: the Python
client 5.1.2 picks a queue at random on each call (it builds a new selector with a
random start per receive), the Node.js client 1.0.8 takes the groups in turn. A
master with nothing readable for the consumer group then long-polls the client's
whole wait before it answers empty. Whenever the groups' backlogs differ — a failover
sent a while of traffic to the other groups, or plain chance — the consumer spends
about half of its receives waiting on a drained group while another holds its
backlog, and that backlog drains at one batch per long poll (issue #25: four empty
receives in a row, ~10 messages/s, while a master reported lag).

What. When this master has nothing readable for a simple consumer's receive, it asks
the other groups' endpoints, one after another and without waiting, before it
long-polls itself; the first answer with messages goes back to the client as it came.
Their receipt handles name the group that delivered them (receipt.py), so the acks,
invisibility changes and dead-letter requests the client sends here for them are
passed on to that group (``pass_on``). A request that arrives with the borrow header
is answered from the local queues only and never passed on again: one hop at most.

Push consumers (auto-renew) never borrow: QueryAssignment gives them one assignment
per group, so they already receive from every group themselves.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.broker.call_headers import header
from rocketcluster.broker.ha.forward import Forwarder
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.routes import RouteTable

if TYPE_CHECKING:
    from rocketcluster.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

BORROW_HEADER = "x-rc-borrowed"  # its value names the group that asked
# A peer's answer to a non-waiting receive comes in milliseconds on a healthy
# cluster; one that takes seconds is failing over (its endpoint holds the call until
# it has a master) or starved of CPU. Long enough for the second, short against the
# client's long poll.
BORROW_TIMEOUT_S = 3.0
# A peer that failed a borrow is left alone this long, so a group that is down costs
# the receives of the others one timeout, not one each.
PEER_BACKOFF_S = 5.0


def borrowed_from(context: Any) -> str:
    """The group that passed this request here ("" when a client sent it)."""
    return header(context, BORROW_HEADER)


class CrossGroup:
    def __init__(
        self,
        own_group: str,
        routes: Callable[[], RouteTable],
        forwarder: Forwarder,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.own_group = own_group
        self.enabled = enabled
        self._routes = routes
        self._forwarder = forwarder
        self._clock = clock
        self._start = 0  # the peer asked first rotates, so no group is always first
        self._resting: dict[str, float] = {}  # peer -> when it may be asked again
        self._headers = ((BORROW_HEADER, own_group),)
        # Counts for the metrics (read when scraped): messages received from each
        # group, and requests passed on to each group, by RPC.
        self.borrowed: Counter[str] = Counter()
        self.passed_on: Counter[tuple[str, str]] = Counter()

    def peers(self) -> list[tuple[str, str]]:
        """(group, endpoint) of the other groups to ask now, in this receive's order."""
        now = self._clock()
        others = [
            (name, endpoint)
            for name, endpoint in self._routes().endpoints().items()
            if name != self.own_group and endpoint and self._resting.get(name, 0.0) <= now
        ]
        if not others:
            return []
        self._start = (self._start + 1) % len(others)
        return others[self._start :] + others[: self._start]

    async def borrow(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> list[spb.ReceiveMessageResponse]:
        """The answer of the first other group that delivered messages for ``request``
        without waiting (its whole stream: status, messages, delivery timestamp), or
        [] when none had any."""
        if not self.enabled:
            return []
        ask = spb.ReceiveMessageRequest()
        ask.CopyFrom(request)
        ask.long_polling_timeout.Clear()  # answer now: this broker does the waiting
        for name, endpoint in self.peers():
            try:
                answer = [
                    response
                    async for response in self._forwarder.stream(
                        endpoint,
                        "ReceiveMessage",
                        ask,
                        context,
                        headers=self._headers,
                        within=BORROW_TIMEOUT_S,
                    )
                ]
            except grpc.aio.AioRpcError as exc:
                self._rest(name, f"{exc.code().name}: {exc.details()}")
                continue
            delivered = sum(1 for r in answer if r.HasField("message"))
            if delivered:
                self.borrowed[name] += delivered
                return answer
            status = next((r.status for r in answer if r.HasField("status")), None)
            if status is not None and status.code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
                # Refused (an ACL, a group it does not know yet): not the client's
                # error, since this group may still have messages for it.
                self._rest(name, f"{status.code}: {status.message}")
        return []

    async def pass_on(
        self, group: str, rpc: str, request: Any, context: Any, *, borrowed: bool
    ) -> Any:
        """``request`` (whose receipt handle ``group`` minted) answered by ``group``;
        refused when it was passed here already or no endpoint of ``group`` is known."""
        if borrowed:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE,
                f"the receipt handle belongs to broker group {group!r}, not to "
                f"{self.own_group!r}, and was passed on once already",
            )
        endpoint = self._routes().endpoints().get(group)
        if not endpoint or group == self.own_group:
            raise MessagingError(
                Code.INVALID_RECEIPT_HANDLE,
                f"the receipt handle belongs to broker group {group!r}, which this "
                "cluster does not list",
            )
        self.passed_on[(group, rpc)] += 1
        try:
            return await self._forwarder.unary(
                endpoint, rpc, request, context, headers=self._headers
            )
        except grpc.aio.AioRpcError as exc:
            raise MessagingError(
                Code.PROXY_TIMEOUT
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                else Code.INTERNAL_SERVER_ERROR,
                f"broker group {group!r}, which delivered this message, did not answer "
                f"({exc.code().name}); retry shortly",
            ) from exc

    def register_metrics(self, metrics: BrokerMetrics) -> None:
        """Counters read when Prometheus scrapes: no work on the receive path."""
        metrics.counter(
            "rocketmq_cross_group_received_messages_total",
            "Messages another broker group delivered for receives that found nothing "
            "on this master, by the group that delivered them",
            lambda: [({"from_group": g}, float(n)) for g, n in sorted(self.borrowed.items())],
        )
        metrics.counter(
            "rocketmq_cross_group_passed_on_total",
            "Acks, invisibility changes and dead-letter requests for messages another "
            "broker group delivered, passed on to that group, by group and RPC",
            lambda: [
                ({"to_group": g, "rpc": rpc}, float(n))
                for (g, rpc), n in sorted(self.passed_on.items())
            ],
        )

    def _rest(self, group: str, why: str) -> None:
        if self._resting.get(group, 0.0) <= self._clock():
            log.info(
                "not asking broker group %s for messages for %.0f s: %s",
                group,
                PEER_BACKOFF_S,
                why,
            )
        self._resting[group] = self._clock() + PEER_BACKOFF_S
