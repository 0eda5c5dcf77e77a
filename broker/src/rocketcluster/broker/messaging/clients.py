"""ClientRegistry: the clients talking to this broker, and their Telemetry streams.

A client is alive while its Telemetry stream is open or it heartbeated recently;
auto-renewed deliveries of a client that went away become visible again. Producers
say which topics they publish in their settings: orphan transaction checks go to a
producer of the transaction's topic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb


@dataclass
class ClientSession:
    client_id: str
    client_type: int = 0
    group: str = ""
    topics: set[str] = field(default_factory=set)
    last_seen: float = 0.0
    outbox: asyncio.Queue[spb.TelemetryCommand] | None = None
    language: str = ""
    version: str = ""
    address: str = ""  # as gRPC names the peer of its Telemetry stream
    subscriptions: set[str] = field(default_factory=set)  # topics a consumer receives


class ClientRegistry:
    def __init__(self, expiry_s: float) -> None:
        self._sessions: dict[str, ClientSession] = {}
        self._expiry = expiry_s

    def touch(self, client_id: str, *, group: str = "", client_type: int = 0) -> ClientSession:
        session = self._sessions.get(client_id)
        if session is None:
            session = self._sessions[client_id] = ClientSession(client_id)
        session.last_seen = asyncio.get_running_loop().time()
        if group:
            session.group = group
        if client_type:
            session.client_type = client_type
        return session

    def get(self, client_id: str) -> ClientSession | None:
        return self._sessions.get(client_id)

    def subscribers(self) -> dict[str, set[str]]:
        """topic -> the consumer groups whose connected consumers subscribe to it
        (retention keeps what they have not consumed: store/consumption.py)."""
        found: dict[str, set[str]] = {}
        for session in self._sessions.values():
            if session.group:
                for topic in session.subscriptions:
                    found.setdefault(topic, set()).add(session.group)
        return found

    def open_stream(self, client_id: str, address: str = "") -> asyncio.Queue[spb.TelemetryCommand]:
        session = self.touch(client_id)
        session.outbox = asyncio.Queue()
        if address:
            session.address = address
        return session.outbox

    def close_stream(self, client_id: str, outbox: asyncio.Queue[spb.TelemetryCommand]) -> None:
        session = self._sessions.get(client_id)
        if session is not None and session.outbox is outbox:
            session.outbox = None

    def apply_settings(self, client_id: str, settings: pb.Settings) -> ClientSession:
        session = self.touch(client_id, client_type=settings.client_type)
        if settings.HasField("publishing"):
            session.topics = {t.name for t in settings.publishing.topics}
        if settings.HasField("subscription"):
            session.group = settings.subscription.group.name
            session.subscriptions = {s.topic.name for s in settings.subscription.subscriptions}
        if settings.HasField("user_agent"):
            agent = settings.user_agent
            known = agent.language in pb.Language.values()
            session.language = pb.Language.Name(agent.language) if known else str(agent.language)
            session.version = agent.version
        return session

    def remove(self, client_id: str) -> None:
        self._sessions.pop(client_id, None)

    def alive(self) -> set[str]:
        now = asyncio.get_running_loop().time()
        return {
            cid
            for cid, s in self._sessions.items()
            if s.outbox is not None or now - s.last_seen < self._expiry
        }

    def expired(self) -> list[str]:
        """Forget clients that are gone; returns their ids."""
        alive = self.alive()
        gone = [cid for cid in self._sessions if cid not in alive]
        for cid in gone:
            del self._sessions[cid]
        return gone

    def stream_for_topic(self, topic: str, prefer: str = "") -> ClientSession | None:
        """A producer with an open stream that publishes ``topic`` (``prefer`` first)."""
        preferred = self._sessions.get(prefer)
        if preferred is not None and preferred.outbox is not None:
            return preferred
        for session in self._sessions.values():
            if session.outbox is not None and topic in session.topics:
                return session
        return None

    def sessions(self) -> list[ClientSession]:
        return list(self._sessions.values())
