"""Group endpoints for local mode: what a per-group Service is in Kubernetes.

One TCP proxy per broker group listens on a stable address and forwards each client
connection to the group's current master, which it learns from the controllers. When
another broker becomes master, it closes the connections it holds to the old one so
clients reconnect — to the new master — at once; a connection arriving while the
group has no master, or while its master refuses connections (killed, not replaced
yet), waits for one instead of being refused (a refused connection would put the
client's gRPC channel into its reconnect backoff), and is never closed while it waits;
a master killed while the proxy connected to it (the connection accepted, then reset
before it answered) is replaced and the client's bytes replayed to the next one. A
group without a master for a moment (a switchover: deposed, then the designated slave
elected) keeps its connections: the old master holds the requests and forwards them to
the new one, as it would behind a Kubernetes Service; only a group left without a
master for longer has them closed.

``python -m rocketcluster.ctl.local.proxy --config FILE``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.api.auth import read_token
from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.client.controller_admin import AsyncControllerAdmin, ControllerAdminError
from rocketcluster.api.tls import ClientTls, TlsFiles, server_ssl_context

log = logging.getLogger("rocketcluster.proxy")

POLL_S = 0.1  # between attempts while no controller leader answers, doubling
POLL_MAX_S = 0.5  # up to this
POLL_TIMEOUT_S = 1.0
WATCH_S = 5.0  # how long the controller leader holds one long poll
WAIT_FOR_MASTER_S = 15.0
NO_MASTER_GRACE_S = 0.5
RETRY_CONNECT_S = 0.05
REPLAY_LIMIT = 1 << 20
BUFFER = 1 << 16


class GroupProxy:
    def __init__(self, group: str, listen: str) -> None:
        self.group = group
        self.listen = listen
        self.master: str | None = None
        self.changed = asyncio.Event()
        # Piped connections, by the client's writer.
        self._links: dict[asyncio.StreamWriter, _Link] = {}
        self._masterless: asyncio.TimerHandle | None = None
        self.switches = 0

    def set_master(self, endpoint: str | None) -> None:
        if endpoint == self.master:
            return
        log.info("group %s: master endpoint %s -> %s", self.group, self.master, endpoint)
        self.master = endpoint
        self.switches += 1
        self.changed.set()
        self.changed = asyncio.Event()
        if self._masterless is not None:
            self._masterless.cancel()
            self._masterless = None
        if endpoint is None:
            self._masterless = asyncio.get_running_loop().call_later(
                NO_MASTER_GRACE_S, self._close_links, None
            )
        else:
            self._close_links(endpoint)

    def _close_links(self, keep: str | None) -> None:
        """Close the piped connections not going to ``keep``: their clients reconnect,
        through us, to the master (or wait here for one). One whose upstream has not
        answered yet loses only its upstream: it is replayed to the next master."""
        self._masterless = None
        for writer, link in list(self._links.items()):
            if link.master != keep:
                if link.replay is None:
                    writer.close()
                link.upstream.close()

    async def _wait_change(self, deadline: float, at_most: float | None = None) -> None:
        """Until the master changes, ``at_most`` seconds pass or ``deadline``."""
        left = deadline - asyncio.get_running_loop().time()
        if at_most is not None:
            left = min(left, at_most)
        if left > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.changed.wait()

    async def _connect(
        self, deadline: float
    ) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the current master, waited for until ``deadline``.

        A master that refuses the connection is dead (a SIGKILL closes its port at
        once) and its replacement is typically a few hundred milliseconds away: the
        client's connection is held here meanwhile, retried on the next master change
        or every RETRY_CONNECT_S. Closing it instead would count as a failed connect
        attempt and put the client's gRPC channel into its reconnect backoff (1 s),
        which was most of the failover time a client saw."""
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            master = self.master
            if master is None:
                await self._wait_change(deadline)
                continue
            host, _, port = master.rpartition(":")
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                if master == self.master:
                    await self._wait_change(deadline, RETRY_CONNECT_S)
                continue
            if master == self.master:
                return master, up_reader, up_writer
            up_writer.close()  # the master changed while we connected
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link: _Link | None = None
        try:
            deadline = asyncio.get_running_loop().time() + WAIT_FOR_MASTER_S
            connected = await self._connect(deadline)
            if connected is None:
                return
            master, up_reader, upstream = connected
            link = self._links[writer] = _Link(master, upstream, deadline)
            await asyncio.gather(
                _to_upstream(reader, link), self._to_client(up_reader, writer, link)
            )
        finally:
            self._links.pop(writer, None)
            writer.close()
            if link is not None:
                link.upstream.close()

    async def _to_client(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        """Upstream bytes to the client. An upstream that closes before it answered
        anything (a master killed while the proxy connected to it: its kernel accepted
        the connection, then reset it) is replaced by the next master, and what the
        client sent is replayed there: the client sees one slow connection, not a
        failed one and the reconnect backoff that follows."""
        try:
            while True:
                try:
                    data = await up_reader.read(BUFFER)
                except (ConnectionError, OSError):
                    data = b""
                if data:
                    link.replay = None  # answered: from here on a plain pipe
                    writer.write(data)
                    await writer.drain()
                    continue
                if link.replay is None or writer.is_closing():
                    return
                if link.master == self.master:  # not replaced yet: no busy loop on it
                    await self._wait_change(link.deadline, RETRY_CONNECT_S)
                connected = await self._connect(link.deadline)
                if connected is None or writer.is_closing():
                    if connected is not None:
                        connected[2].close()
                    return
                link.upstream.close()
                link.master, up_reader, link.upstream = connected
                link.upstream.write(bytes(link.replay))
                log.info("group %s: replayed a connection to %s", self.group, link.master)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(self) -> asyncio.Server:
        host, _, port = self.listen.rpartition(":")
        return await asyncio.start_server(self.handle, host, int(port), reuse_address=True)


@dataclass
class _Link:
    """A piped connection: its upstream, and while the upstream has not answered yet,
    every byte the client sent (to replay on another master if this one dies first)."""

    master: str
    upstream: asyncio.StreamWriter
    deadline: float  # (loop time) no replay after this: the client's connection closes
    replay: bytearray | None = field(default_factory=bytearray)


async def _to_upstream(reader: asyncio.StreamReader, link: _Link) -> None:
    """Client bytes to the current upstream. A write to an upstream that just died is
    lost on purpose: ``_to_client`` replays it, or closes the client's connection."""
    try:
        while data := await reader.read(BUFFER):
            if link.replay is not None:
                link.replay += data
                if len(link.replay) > REPLAY_LIMIT:
                    link.replay = None  # too much to hold: a plain pipe
            upstream = link.upstream
            upstream.write(data)
            with contextlib.suppress(ConnectionError, OSError):
                await upstream.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        link.upstream.close()


def _masters(groups: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each group's master client endpoint, from the controller leader's group views."""
    out: dict[str, str | None] = {}
    for g in groups:
        master = g["masterId"]
        registered = g["replicas"].get(str(master)) if master is not None else None
        out[g["group"]] = split_registered(registered)[0] if registered else None
    return out


async def _follow_masters(
    controllers: AsyncControllerAdmin, proxies: dict[str, GroupProxy]
) -> None:
    """Point each group's proxy at its master as the controller leader sees it. A long
    poll (GET /v1/watch/groups) is answered as soon as the views change; while no
    leader answers the proxy keeps what it knew and asks again, POLL_S later at first
    and up to POLL_MAX_S while none answers (each attempt asks every member)."""
    known = ""
    pause = POLL_S
    while True:
        try:
            answer = await controllers.watch_groups(known, WATCH_S)
        except ControllerAdminError:
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
            continue
        pause = POLL_S
        known = answer["version"]
        masters = _masters(answer["groups"])
        for group, proxy in proxies.items():
            proxy.set_master(masters.get(group))


async def _admin(
    proxies: dict[str, GroupProxy], listen: str, tls: TlsFiles | None = None
) -> asyncio.Server:
    """A minimal HTTP endpoint: /readyz (every group has a master) and /v1/groups;
    https when the cluster runs TLS."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readline()
            while (await reader.readline()).strip():
                pass
            path = request.split()[1].decode() if len(request.split()) > 1 else "/"
            body: dict[str, Any] = {
                g: {"master": p.master, "switches": p.switches, "listen": p.listen}
                for g, p in proxies.items()
            }
            ready = all(p.master for p in proxies.values())
            status = "200 OK" if path != "/readyz" or ready else "503 Service Unavailable"
            payload = json.dumps(body if path != "/readyz" else {"ready": ready}).encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    host, _, port = listen.rpartition(":")
    ssl = server_ssl_context(tls) if tls is not None else None
    return await asyncio.start_server(handle, host, int(port), reuse_address=True, ssl=ssl)


async def run(config: dict[str, Any]) -> None:
    proxies = {group: GroupProxy(group, listen) for group, listen in config["groups"].items()}
    servers = [await p.serve() for p in proxies.values()]
    tls = TlsFiles.model_validate(config["tls"]) if config.get("tls") else None
    client_tls = ClientTls.of(tls)
    servers.append(await _admin(proxies, config["admin"], tls))
    print("READY proxy", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    token_file = config.get("admin_token_file")
    async with AsyncControllerAdmin(
        config["controllers"],
        tls=client_tls,
        token=read_token(Path(token_file)) if token_file else None,
        timeout=POLL_TIMEOUT_S,
        probe_timeout=POLL_TIMEOUT_S,
        attempts=1,  # the next attempt is POLL_S away
    ) as controllers:
        follow = asyncio.create_task(_follow_masters(controllers, proxies), name="follow")
        await stop.wait()
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    for server in servers:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-group endpoints that follow the master.")
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(run(json.loads(args.config.read_text())))


if __name__ == "__main__":
    main()
