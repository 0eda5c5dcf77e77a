"""api/tls.py without broker processes: bad files fail with their name, rewritten files are
picked up (and a half-done rewrite is not), and a grpc server in this process serves
TLS 1.2+ only, refusing plaintext; our channels follow a renewal of our own certificate."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
import sys
import warnings
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from rocketcluster.api.tls import (
    ChannelPool,
    ClientTls,
    ServerCertificates,
    TlsFiles,
    TlsMaterialError,
    add_port,
    load_material,
    server_ssl_context,
)
from rocketcluster.ctl.local.tls import LocalCA, certificate_serial


@pytest.fixture
def issued(tmp_path: Path) -> tuple[LocalCA, TlsFiles]:
    ca = LocalCA.ensure(tmp_path / "ca")
    return ca, ca.issue("node", ["127.0.0.1"], tmp_path / "issued")


def test_missing_unreadable_and_mismatched_files_name_the_file(
    tmp_path: Path, issued: tuple[LocalCA, TlsFiles]
) -> None:
    ca, files = issued
    missing = files.model_copy(update={"cert_file": tmp_path / "nope.crt"})
    with pytest.raises(TlsMaterialError, match=r"nope\.crt") as error:
        load_material(missing)
    assert error.value.path == tmp_path / "nope.crt"

    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key")
    with pytest.raises(TlsMaterialError, match=r"garbage\.key: not a PEM file"):
        load_material(files.model_copy(update={"key_file": garbage}))

    other = ca.issue("other", ["127.0.0.1"], tmp_path / "other")
    with pytest.raises(TlsMaterialError, match="does not match"):
        load_material(files.model_copy(update={"key_file": other.key_file}))

    with pytest.raises(TlsMaterialError, match="not a CA bundle"):
        load_material(files.model_copy(update={"ca_file": files.key_file}))


def test_rewritten_files_are_reloaded_and_a_half_rewrite_is_not(
    tmp_path: Path, issued: tuple[LocalCA, TlsFiles]
) -> None:
    ca, files = issued
    certs = ServerCertificates(files)
    assert not certs.changed()
    first = certs.material

    # Half a rotation: a new key beside the old certificate. Kept: the old material.
    staged = ca.issue("node", ["127.0.0.1"], tmp_path / "staged")
    shutil.copy(staged.key_file, files.key_file)
    assert not certs.changed() and certs.material == first

    shutil.copy(staged.cert_file, files.cert_file)
    assert certs.changed() and certs.generation == 1
    assert certs.material.cert == staged.cert_file.read_bytes()
    assert not certs.changed()


def test_admin_context_serves_new_files_from_the_next_handshake(
    tmp_path: Path, issued: tuple[LocalCA, TlsFiles]
) -> None:
    ca, files = issued
    context = server_ssl_context(files)
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2

    async def serial_served() -> int:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(files.ca_file))
        try:
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
        finally:
            server.close()
        return int(x509.load_der_x509_certificate(der).serial_number)

    assert asyncio.run(serial_served()) == certificate_serial(files.cert_file)
    ca.issue("node", ["127.0.0.1"], files.cert_file.parent)
    assert asyncio.run(serial_served()) == certificate_serial(files.cert_file)


def test_grpc_tls_port_refuses_plaintext_and_old_tls(issued: tuple[LocalCA, TlsFiles]) -> None:
    """The same probes against a plaintext port first (a server that answers h2c with a
    SETTINGS frame, and a TLS client that then meets no TLS): they can tell."""
    _, files = issued

    async def probe(tls: TlsFiles | None) -> tuple[bytes, str | None, str | None]:
        server = grpc.aio.server()
        port = add_port(server, "127.0.0.1:0", tls, mutual=False)
        await server.start()
        loop = asyncio.get_running_loop()
        try:
            plaintext = await loop.run_in_executor(None, _plaintext_answer, port)
            old = await loop.run_in_executor(None, _tls_refused, port, files.ca_file, OLD)
            current = await loop.run_in_executor(None, _tls_refused, port, files.ca_file, TLS12)
        finally:
            await server.stop(0)
        return plaintext, old, current

    plaintext, old, current = asyncio.run(probe(None))
    assert plaintext[3:4] == b"\x04"  # an HTTP/2 SETTINGS frame: h2c spoken
    assert old is not None and "WRONG_VERSION_NUMBER" in old

    plaintext, old, current = asyncio.run(probe(files))
    assert plaintext == b""  # no h2c on a TLS port: the connection just ends
    assert old is not None and "WRONG_VERSION_NUMBER" not in old  # TLS, but not 1.1
    assert current is None  # TLS 1.2 gets through


OLD = ssl.TLSVersion.TLSv1_1
TLS12 = ssl.TLSVersion.TLSv1_2


def _plaintext_answer(port: int) -> bytes:
    """What a TLS port says to a plaintext HTTP/2 client preface."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        try:
            return sock.recv(1024)
        except (ConnectionResetError, TimeoutError):
            return b""


def _tls_refused(port: int, ca_file: Path, version: ssl.TLSVersion) -> str | None:
    """The error a client speaking only TLS ``version`` gets, or None when it got
    through."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(ca_file))
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = version
        context.maximum_version = version
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return None
    except (ssl.SSLError, ConnectionResetError) as exc:
        return str(exc)


def test_channel_pool_presents_a_renewed_client_certificate(
    tmp_path: Path, issued: tuple[LocalCA, TlsFiles]
) -> None:
    """A mutual TLS server that answers with the serial of the certificate the caller
    presented: after our certificate is renewed on disk, the pool's next channel
    presents the new one (a kept channel would present the old one for ever)."""
    ca, server_files = issued
    client_files = ca.issue("client", [], tmp_path / "client")

    async def who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        [pem] = context.auth_context()["x509_pem_cert"]
        return str(x509.load_pem_x509_certificate(pem).serial_number).encode()

    handler = grpc.method_handlers_generic_handler(
        "t.Peer", {"Who": grpc.unary_unary_rpc_method_handler(who)}
    )

    async def run() -> tuple[int, int, int]:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = add_port(server, "127.0.0.1:0", server_files, mutual=True)
        await server.start()
        pool = ChannelPool(ClientTls(client_files), check_every_s=0, grace_s=0)
        address = f"127.0.0.1:{port}"

        async def ask() -> int:
            call = pool.channel(address).unary_unary("/t.Peer/Who")
            return int(await call(b"", timeout=10))

        try:
            first = await ask()
            ca.issue("client", [], client_files.cert_file.parent)  # renewed in place
            second = await ask()
            renewals = pool.renewals
        finally:
            await pool.close()
            await server.stop(0)
        return first, second, renewals

    first, second, renewals = asyncio.run(run())
    assert first != second
    assert second == certificate_serial(client_files.cert_file)
    assert renewals == 1


@pytest.mark.parametrize("role", ["broker", "controller"])
def test_a_process_with_unusable_cert_files_refuses_to_start_and_says_which(
    tmp_path: Path, issued: tuple[LocalCA, TlsFiles], role: str
) -> None:
    """Before it touches its data: a key that does not match the certificate."""
    ca, files = issued
    other = ca.issue("other", ["127.0.0.1"], tmp_path / "other")
    tls = files.model_copy(update={"key_file": other.key_file}).model_dump(
        mode="json", by_alias=True
    )
    data = tmp_path / "data"
    config: dict[str, object] = {"cluster": "c", "dataDir": str(data), "tls": tls}
    if role == "broker":
        config |= {"group": "c-broker-0", "bindHost": "127.0.0.1"}
    else:
        config |= {
            "nodeId": 1,
            "members": [{"id": 1, "raftAddress": "127.0.0.1:1", "adminAddress": "127.0.0.1:2"}],
        }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", f"rocketcluster.{role}.main", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"{files.cert_file}: does not match {other.key_file}" in done.stderr
    assert not data.exists()
