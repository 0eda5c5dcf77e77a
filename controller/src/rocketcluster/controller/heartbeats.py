"""BrokerLiveness: which brokers this controller hears (leader-local, not replicated).

A broker is alive while its WatchRoles channel to this member is open, or while its
last heartbeat is younger than the timeout it announced. The moment a channel breaks,
its broker counts as dead: that is how a killed master is noticed in well under a
heartbeat timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rocketcluster.controller.election import BrokerLiveInfo

DEFAULT_TIMEOUT_MS = 3000


@dataclass
class _Seen:
    info: BrokerLiveInfo
    address: str = ""
    last_heartbeat: float = 0.0
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000
    channels: int = 0
    channel_lost_at: float | None = None
    history: list[float] = field(default_factory=list)


class BrokerLiveness:
    def __init__(self, clock: object = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[tuple[str, int], _Seen] = {}

    def _now(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    def heartbeat(self, group: str, info: BrokerLiveInfo, address: str, timeout_ms: int) -> None:
        seen = self._seen.get((group, info.broker_id))
        if seen is None:
            seen = self._seen[(group, info.broker_id)] = _Seen(info)
        seen.info = info
        seen.address = address
        seen.last_heartbeat = self._now()
        seen.timeout_s = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000

    def channel_opened(self, group: str, broker_id: int) -> None:
        seen = self._seen.setdefault((group, broker_id), _Seen(BrokerLiveInfo(broker_id)))
        seen.channels += 1
        seen.last_heartbeat = self._now()

    def channel_closed(self, group: str, broker_id: int) -> None:
        seen = self._seen.get((group, broker_id))
        if seen is not None:
            seen.channels = max(0, seen.channels - 1)
            if seen.channels == 0:
                seen.channel_lost_at = self._now()

    def is_alive(self, group: str, broker_id: int) -> bool:
        seen = self._seen.get((group, broker_id))
        if seen is None:
            return False
        if seen.channels > 0:
            return True
        if seen.channel_lost_at is not None and seen.channel_lost_at >= seen.last_heartbeat:
            return False  # the channel broke after the last heartbeat: dead now
        return self._now() - seen.last_heartbeat < seen.timeout_s

    def last_heartbeat(self, group: str, broker_id: int) -> float:
        seen = self._seen.get((group, broker_id))
        return seen.last_heartbeat if seen else 0.0

    def now(self) -> float:
        return self._now()

    def alive_in(self, group: str) -> dict[int, BrokerLiveInfo]:
        return {
            broker_id: seen.info
            for (g, broker_id), seen in self._seen.items()
            if g == group and self.is_alive(g, broker_id)
        }

    def view(self) -> list[dict[str, object]]:
        now = self._now()
        return [
            {
                "group": group,
                "brokerId": broker_id,
                "address": seen.address,
                "alive": self.is_alive(group, broker_id),
                "channels": seen.channels,
                "secondsSinceHeartbeat": round(now - seen.last_heartbeat, 3),
                "epoch": seen.info.epoch,
                "maxOffset": seen.info.max_offset,
                "confirmOffset": seen.info.confirm_offset,
            }
            for (group, broker_id), seen in sorted(self._seen.items())
        ]
