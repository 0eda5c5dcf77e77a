"""TLS material for every process and client: which files, and the credentials built
from them.

One model, ``TlsFiles`` (a CA bundle, a certificate chain, its key — what cert-manager
writes into a Secret as ca.crt, tls.crt, tls.key), sits in the broker and controller
process configs. From it:

- the client port and the admin HTTP authenticate the server only (the official
  RocketMQ clients present no certificate);
- the HA port and the controller port require a client certificate signed by the CA
  (mutual TLS): a replica or controller without one cannot replicate, register or vote;
- our own clients trust the CA and present the process's certificate.

Certificates are reloaded without a restart: servers re-read the files when one of
them changes (cert-manager rewrites a mounted Secret in place, through a symlink swap),
at the next handshake. Connections already open keep the certificate they agreed on.
TLS 1.2 is the minimum everywhere (gRPC's own floor; set explicitly for HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = [
    "ClientTls",
    "ServerCertificates",
    "TlsFiles",
    "TlsMaterial",
    "TlsMaterialError",
    "add_port",
    "admin_scheme",
    "grpc_channel",
    "grpc_server_credentials",
    "http_verify",
    "load_material",
    "server_ssl_context",
]


class TlsFiles(BaseModel):
    """Paths of a CA bundle, a certificate chain and its private key (PEM)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    ca_file: Path
    cert_file: Path
    key_file: Path

    def paths(self) -> tuple[Path, Path, Path]:
        return (self.ca_file, self.cert_file, self.key_file)


class TlsMaterialError(ValueError):
    """A certificate file is missing, unreadable, not PEM, or does not match its key."""

    def __init__(self, path: Path | None, reason: str) -> None:
        where = f"{path}: " if path is not None else ""
        super().__init__(
            f"TLS material unusable: {where}{reason} (check the tls files of the process "
            "config, or the Secret named by spec.security.tls.secretName)"
        )
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class TlsMaterial:
    """The bytes of one consistent read of the three files."""

    ca: bytes
    cert: bytes
    key: bytes


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsMaterialError(path, exc.strerror or type(exc).__name__) from exc
    if b"-----BEGIN " not in data:
        raise TlsMaterialError(path, "not a PEM file")
    return data


def load_material(files: TlsFiles) -> TlsMaterial:
    """Read and check the files: readable PEM, and a certificate that matches its key
    (checked by OpenSSL here, so a mismatch fails the start with the file names rather
    than every later handshake)."""
    ca, cert, key = (_read(p) for p in files.paths())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(files.cert_file, files.key_file)
    except ssl.SSLError as exc:
        raise TlsMaterialError(files.cert_file, f"does not match {files.key_file}: {exc}") from exc
    try:
        context.load_verify_locations(cafile=files.ca_file)
    except ssl.SSLError as exc:
        raise TlsMaterialError(files.ca_file, f"not a CA bundle: {exc}") from exc
    return TlsMaterial(ca=ca, cert=cert, key=key)


def _stamp(files: TlsFiles) -> tuple[tuple[int, int, int], ...]:
    return _stamp_paths(files.paths())


def _stamp_paths(paths: Sequence[Path]) -> tuple[tuple[int, int, int], ...]:
    """What changes when a file is rewritten: mtime, size and inode of each (a Secret
    volume swaps a symlink, so the inode moves even when mtimes tie)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class ServerCertificates:
    """The current material of ``files``, re-read when the files change.

    ``changed()`` is cheap (three stats) and called at handshakes; a rewrite caught
    half-done (a key that no longer matches) keeps the previous material until the
    files agree again, so a rotation never takes a port down."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()  # gRPC calls the fetcher from its own threads
        self._stamp = _stamp(files)
        self.material = load_material(files)
        self.generation = 0

    def changed(self) -> bool:
        """Re-read the files if they changed; True when new material was loaded."""
        stamp = _stamp(self.files)
        if stamp == self._stamp:
            return False
        with self._lock:
            if stamp == self._stamp:
                return False
            try:
                material = load_material(self.files)
            except TlsMaterialError:
                return False  # mid-rewrite: try again at the next handshake
            self._stamp = stamp
            if material == self.material:
                return False
            self.material = material
            self.generation += 1
            return True


def grpc_server_credentials(
    files: TlsFiles, *, require_client_cert: bool
) -> tuple[grpc.ServerCredentials, ServerCertificates]:
    """Server credentials that pick up rewritten files at the next handshake.

    ``require_client_cert``: mutual TLS (HA and controller ports): the peer must
    present a certificate chaining to the CA in ``files.ca_file``."""
    certs = ServerCertificates(files)

    def config(material: TlsMaterial) -> Any:
        return grpc.ssl_server_certificate_configuration(
            [(material.key, material.cert)], root_certificates=material.ca
        )

    def fetch() -> Any:
        return config(certs.material) if certs.changed() else None

    credentials = grpc.dynamic_ssl_server_credentials(
        config(certs.material), fetch, require_client_authentication=require_client_cert
    )
    return credentials, certs


def add_port(server: grpc.aio.Server, address: str, files: TlsFiles | None, *, mutual: bool) -> int:
    """Listen on ``address``: TLS (mutual when ``mutual``) when ``files`` is given, else
    plaintext — never both on one port (no plaintext fallback). Returns the bound port
    (0 when it could not bind, as ``add_insecure_port``)."""
    if files is None:
        port: int = server.add_insecure_port(address)
        return port
    credentials, _ = grpc_server_credentials(files, require_client_cert=mutual)
    port = server.add_secure_port(address, credentials)
    return port


class ClientTls:
    """What our own clients present and trust: the CA, and (for mutual TLS ports) the
    process's certificate. Credentials are built from the files' current contents each
    time a channel is made, so a new channel after a rotation uses the new ones."""

    def __init__(self, files: TlsFiles | None = None, *, ca_file: Path | None = None) -> None:
        if files is None and ca_file is None:
            raise ValueError("ClientTls needs TlsFiles or at least a ca_file")
        self.files = files
        self.ca_file = files.ca_file if files is not None else ca_file

    @classmethod
    def of(cls, files: TlsFiles | None) -> ClientTls | None:
        return None if files is None else cls(files)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        if self.files is None:
            assert self.ca_file is not None
            return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_file))
        material = load_material(self.files)
        return grpc.ssl_channel_credentials(
            root_certificates=material.ca,
            private_key=material.key,
            certificate_chain=material.cert,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """For HTTP clients (httpx ``verify=``): trust the CA, TLS 1.2+."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.files is not None:
            context.load_cert_chain(self.files.cert_file, self.files.key_file)
        return context


def grpc_channel(
    address: str, tls: ClientTls | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """A grpc.aio channel to ``address``: TLS when ``tls`` is given, else plaintext."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=list(options))


class ChannelPool:
    """grpc.aio channels by address that follow a rotation of our own certificate.

    A channel keeps the credentials it was made with, also for its reconnects: after
    cert-manager renews the certificate, a long-lived channel would keep presenting the
    old one until it expires and the peers refuse it. So when the files change (checked
    at most every ``check_every_s``), the next ``channel()`` call retires every channel
    (closed after ``grace_s``, so calls in flight finish) and makes new ones."""

    def __init__(
        self,
        tls: ClientTls | None,
        options: Sequence[tuple[str, Any]] = (),
        *,
        check_every_s: float = 1.0,
        grace_s: float = 30.0,
    ) -> None:
        self.tls = tls
        self.options = list(options)
        self.check_every_s = check_every_s
        self.grace_s = grace_s
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._stamp = self._current_stamp()
        self._checked_at = time.monotonic()
        self.renewals = 0

    def _current_stamp(self) -> tuple[tuple[int, int, int], ...]:
        if self.tls is None:
            return ()
        if self.tls.files is not None:
            return _stamp(self.tls.files)
        assert self.tls.ca_file is not None
        return _stamp_paths([self.tls.ca_file])

    def _renewed(self) -> bool:
        now = time.monotonic()
        if self.tls is None or now - self._checked_at < self.check_every_s:
            return False
        self._checked_at = now
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    def channel(self, address: str) -> grpc.aio.Channel:
        if self._renewed():
            self.renewals += 1
            for old in self._channels.values():
                task = asyncio.get_running_loop().create_task(old.close(self.grace_s))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
            self._channels.clear()
        found = self._channels.get(address)
        if found is None:
            found = self._channels[address] = grpc_channel(address, self.tls, self.options)
        return found

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        for task in list(self._closing):
            task.cancel()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def server_ssl_context(files: TlsFiles) -> ssl.SSLContext:
    """An SSL context for the admin HTTP server (TLS 1.2+, no client certificate: the
    admin API's own token authenticates callers) that serves rewritten files from the
    next handshake on: each ClientHello checks the files and, once they changed, hands
    the connection a context loaded from the new ones."""
    certs = ServerCertificates(files)

    def build() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(files.cert_file, files.key_file)
        return context

    base = build()
    current = [base]  # the newest context; this closure is its only owner

    def on_client_hello(conn: Any, server_name: str | None, context: ssl.SSLContext) -> None:
        if certs.changed():
            # Rewritten again meanwhile: the next handshake tries again.
            with contextlib.suppress(OSError, ssl.SSLError):
                current[0] = build()
        if current[0] is not base:
            conn.context = current[0]

    base.sni_callback = on_client_hello
    return base


def admin_scheme(tls: object | None) -> str:
    """The admin HTTP scheme of a process whose TLS setting is ``tls``."""
    return "https" if tls is not None else "http"


def http_verify(tls: ClientTls | None) -> ssl.SSLContext | bool:
    """httpx's ``verify=`` for our admin endpoints."""
    return tls.ssl_context() if tls is not None else True
