"""Group endpoints for local mode: what a per-group Service is in Kubernetes.

One TCP proxy per broker group listens on a stable address and forwards each client
connection to the group's current master, which it learns from the controllers. When
another broker becomes master, it closes the connections it holds to the old one so
clients reconnect — to the new master — at once; a connection arriving while the
group has no master waits for one instead of being refused (a refused connection
would put the client's gRPC channel into its reconnect backoff), and is never closed
while it waits. A group without a master for a moment (a switchover: deposed, then
the designated slave elected) keeps its connections: the old master holds the
requests and forwards them to the new one, as it would behind a Kubernetes Service;
only a group left without a master for longer has them closed.

``python -m rocketcluster.ctl.local.proxy --config FILE``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api.auth import read_token
from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.tls import ClientTls, TlsFiles, admin_scheme, http_verify, server_ssl_context

log = logging.getLogger("rocketcluster.proxy")

POLL_S = 0.1
WAIT_FOR_MASTER_S = 15.0
NO_MASTER_GRACE_S = 0.5
BUFFER = 1 << 16


class GroupProxy:
    def __init__(self, group: str, listen: str) -> None:
        self.group = group
        self.listen = listen
        self.master: str | None = None
        self.changed = asyncio.Event()
        # Piped connections: the client's writer -> (upstream endpoint, upstream writer).
        self._links: dict[asyncio.StreamWriter, tuple[str, asyncio.StreamWriter]] = {}
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
        through us, to the master (or wait here for one)."""
        self._masterless = None
        for writer, (upstream, upstream_writer) in list(self._links.items()):
            if upstream != keep:
                writer.close()
                upstream_writer.close()

    async def _wait_master(self) -> str | None:
        deadline = asyncio.get_running_loop().time() + WAIT_FOR_MASTER_S
        while self.master is None:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.changed.wait()
        return self.master

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            while True:
                master = await self._wait_master()
                if master is None:
                    return
                host, _, port = master.rpartition(":")
                try:
                    up_reader, upstream_writer = await asyncio.open_connection(host, int(port))
                except OSError:
                    return
                if master == self.master:
                    break
                upstream_writer.close()  # the master changed while we connected
            self._links[writer] = (master, upstream_writer)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(up_reader, writer))
        finally:
            self._links.pop(writer, None)
            for w in (writer, upstream_writer):
                if w is not None:
                    w.close()

    async def serve(self) -> asyncio.Server:
        host, _, port = self.listen.rpartition(":")
        return await asyncio.start_server(self.handle, host, int(port), reuse_address=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(BUFFER):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _masters(
    http: httpx.AsyncClient, admins: list[str], scheme: str = "http"
) -> dict[str, str | None] | None:
    """Each group's master client endpoint, as the controller leader sees it."""
    for admin in admins:
        try:
            cluster = (await http.get(f"{scheme}://{admin}/v1/cluster")).json()
            leader = next(
                (m["adminAddress"] for m in cluster["members"] if m["id"] == cluster["leader"]),
                None,
            )
            if leader is None:
                continue
            groups = (await http.get(f"{scheme}://{leader}/v1/groups")).json()
        except (httpx.HTTPError, ValueError, KeyError):
            continue
        out: dict[str, str | None] = {}
        for g in groups:
            master = g["masterId"]
            registered = g["replicas"].get(str(master)) if master is not None else None
            out[g["group"]] = split_registered(registered)[0] if registered else None
        return out
    return None


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
    headers = {"authorization": f"Bearer {read_token(Path(token_file))}"} if token_file else {}
    async with httpx.AsyncClient(
        timeout=1.0, verify=http_verify(client_tls), headers=headers
    ) as http:
        while not stop.is_set():
            masters = await _masters(http, config["controllers"], admin_scheme(client_tls))
            if masters is not None:
                for group, proxy in proxies.items():
                    proxy.set_master(masters.get(group))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await stop.wait()
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
