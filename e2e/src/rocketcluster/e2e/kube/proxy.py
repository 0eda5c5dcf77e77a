"""kube-proxy for ClusterIP Services: one asyncio TCP listener per Service port on
the Service's own loopback address, forwarding each new connection to one Ready
endpoint, round robin.

As with iptables, the choice is made per connection: a connection keeps its pod
when the endpoints change (a relabelled pod keeps its old connections; new ones go
elsewhere); a half-close (EOF) is passed on and the other direction kept open, as
through NAT; a connection whose pod dies is closed, because its upstream is. With
no Ready endpoint a connection is refused (closed at once). Headless Services get
no listener. UDP is not proxied.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("rocketcluster.realiser.proxy")
BUFFER = 1 << 16

PortKey = tuple[str, str, int]  # "ns/service", ip, port
Endpoint = tuple[str, int]
Picker = Callable[[], list[Endpoint]]


@dataclass
class _Listener:
    server: asyncio.base_events.Server
    pick: Picker
    turn: int = 0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Copy until EOF, then pass the half-close on (a client may shut its sending
    side and still wait for the answer, as through NAT); False if the connection
    broke instead."""
    try:
        while data := await reader.read(BUFFER):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        return True
    except (ConnectionError, OSError, RuntimeError):
        return False


class ServiceProxies:
    def __init__(self) -> None:
        self._listeners: dict[PortKey, _Listener] = {}
        # With NetworkPolicies enforced: a client from this network (a pod) keeps its
        # address upstream, as kube-proxy's DNAT keeps it, so the pod's policies judge
        # the client, not the proxy. None: connect from the host's address.
        self.keep_source: ipaddress.IPv4Network | None = None

    def _source(self, writer: asyncio.StreamWriter) -> tuple[str, int] | None:
        peer = writer.get_extra_info("peername")
        if self.keep_source is None or not peer:
            return None
        try:
            inside = ipaddress.ip_address(peer[0]) in self.keep_source
        except ValueError:
            return None
        return (str(peer[0]), 0) if inside else None

    def _choose(self, key: PortKey) -> Endpoint | None:
        listener = self._listeners.get(key)
        if listener is None:
            return None
        endpoints = listener.pick()
        if not endpoints:
            return None
        listener.turn += 1
        return endpoints[listener.turn % len(endpoints)]

    async def _handle(
        self, key: PortKey, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        upstream = self._choose(key)
        if upstream is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                *upstream, local_addr=self._source(writer)
            )
        except OSError:
            writer.close()
            return
        pipes = [
            asyncio.ensure_future(_pipe(reader, up_writer)),
            asyncio.ensure_future(_pipe(up_reader, writer)),
        ]
        try:
            # Both directions run to their EOF; a broken one ends the other at once.
            pending: set[asyncio.Future[bool]] = set(pipes)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if not all(task.result() for task in done):
                    break
        finally:
            for task in pipes:
                task.cancel()
            for stream in (writer, up_writer):
                with contextlib.suppress(Exception):
                    stream.close()

    async def sync(self, wanted: dict[PortKey, Picker]) -> None:
        """Listen on exactly the wanted (service, ip, port)s; ``wanted[key]()`` gives
        the Ready endpoints at connection time."""
        for key in [k for k in self._listeners if k not in wanted]:
            self._listeners.pop(key).server.close()
        for key, pick in wanted.items():
            if key in self._listeners:
                self._listeners[key].pick = pick
                continue
            _, ip, port = key

            def serve(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: PortKey = key
            ) -> Awaitable[None]:
                return self._handle(key, reader, writer)

            try:
                server = await asyncio.start_server(serve, ip, port, reuse_address=True)
            except OSError as exc:
                log.warning("cannot listen on %s:%s for %s: %s", ip, port, key[0], exc)
                continue
            self._listeners[key] = _Listener(server, pick)

    async def close(self) -> None:
        for listener in self._listeners.values():
            listener.server.close()
        for listener in self._listeners.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(listener.server.wait_closed(), 1.0)
        self._listeners.clear()
