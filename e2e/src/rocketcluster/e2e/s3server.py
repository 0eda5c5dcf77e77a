"""A real S3 endpoint on loopback for tests and benchmarks: moto's S3 server app in a
thread, behind a small TCP gate that can take the endpoint down and bring it back.

Three things differ from starting moto's ``ThreadedMotoServer`` directly, each for a
reason found while testing the tier's backends against it:

- **Conditional writes are serialised.** moto checks ``If-None-Match: *`` and then
  stores the object in two steps without a lock, so two concurrent create-only writes
  of one key can, in principle, both succeed; AWS decides atomically. Requests that
  carry a write condition run one at a time here, which gives moto S3's guarantee
  (other requests stay concurrent). The server app is the one ``ThreadedMotoServer``
  runs (``DomainDispatcherApplication`` over ``create_backend_app``), wrapped.
- **Outages go through a gate, not a server restart.** Restarting moto on the same
  port would keep its objects (they live in moto's process-wide backends, not in the
  server; checked), and werkzeug ends every response with ``Connection: close``, so
  no pooled connection outlives a restart. But a restart lets requests in flight
  finish, cannot make the endpoint hang instead of refusing, and takes half a second
  to stop. The gate relays every connection itself, so :meth:`S3Server.pause` can
  refuse new connections (or accept and never answer them, to exercise timeouts) and
  cut those in flight, and :meth:`S3Server.resume` opens the same port again; moto
  never stops, so nothing is lost.
- **No ``S3_UPLOAD_PART_MIN_SIZE``.** moto reads it once, when ``moto.settings`` is
  first imported, so setting it in a fixture works or not depending on import order;
  and the S3 backend refuses parts below S3's real 5 MiB minimum anyway. Tests
  exercise multipart uploads with 5 MiB parts (a 12 MiB object costs well under a
  second on loopback).

moto keeps objects in process-wide state shared by every server in the process:
buckets made through :meth:`S3Server.create_bucket` are emptied and removed at
:meth:`S3Server.stop`; give buckets unique names when servers or tests share a process.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from mypy_boto3_s3.client import S3Client

__all__ = ["S3Server", "running_s3_server"]

ACCESS_KEY: Final = "testing"
SECRET_KEY: Final = "testing"
REGION: Final = "us-east-1"
_CHUNK: Final = 256 * 1024


class _QuietHandler(MotoRequestHandler):
    """moto's request handler without a log line per request on stderr."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return


def _serialise_conditional_writes(app: WSGIApplication) -> WSGIApplication:
    """Run requests carrying ``If-None-Match`` / ``If-Match`` one at a time (see the
    module docstring); the response is produced inside the lock."""
    lock = threading.Lock()

    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        if conditional and environ.get("REQUEST_METHOD") in ("PUT", "POST"):
            with lock:
                response = app(environ, start_response)
                try:
                    return [b"".join(response)]
                finally:
                    close = getattr(response, "close", None)
                    if close is not None:
                        close()
        return app(environ, start_response)

    return wrapped


class _Relay:
    """One client connection and its upstream twin, pumped by two threads; the
    sockets are closed by whichever pump ends last, so no thread ever works on a
    closed (and perhaps reused) descriptor."""

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        on_done: Callable[[_Relay], None],
    ) -> None:
        self.client = client
        self.upstream = upstream
        self._on_done = on_done
        self._lock = threading.Lock()
        self._running = 2
        self.threads = [
            threading.Thread(target=self._pump, args=pair, name="s3-gate-relay", daemon=True)
            for pair in ((client, upstream), (upstream, client))
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(_CHUNK):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self.cut()
            with self._lock:
                self._running -= 1
                last = self._running == 0
            if last:
                self.client.close()
                self.upstream.close()
                self._on_done(self)

    def cut(self) -> None:
        """Wake both pumps: each recv returns at once and the relay winds down."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def join(self) -> None:
        for thread in self.threads:
            thread.join()


class _Gate:
    """A TCP relay from a loopback port to the moto server that can be closed
    (connections refused), black-holed (accepted, never answered) and opened again on
    the same port."""

    def __init__(self, host: str, upstream: tuple[str, int]) -> None:
        self._host = host
        self._upstream = upstream
        self._port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._hang = False
        self._relays: set[_Relay] = set()
        self._parked: set[socket.socket] = set()

    @property
    def port(self) -> int:
        return self._port

    def open(self) -> None:
        """Listen (on the same port as before, once there is one) and relay."""
        with self._lock:
            self._hang = False
            parked, self._parked = self._parked, set()
        for sock in parked:
            _reset(sock)
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self._host, self._port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        self._port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept_loop, args=(listener,), name=f"s3-gate-{self._port}", daemon=True
        )
        self._acceptor.start()

    def refuse(self) -> None:
        """Close the port (connects are refused) and cut every live connection."""
        self._stop_accepting()
        self._cut_all()

    def hang(self) -> None:
        """Keep the port open but answer nothing: new connections are accepted and
        left waiting until :meth:`open` resets them; live connections are cut."""
        if self._listener is None:
            self.open()
        with self._lock:
            self._hang = True
        self._cut_all()

    def close(self) -> None:
        """Stop everything the gate started and wait for its threads."""
        self._stop_accepting()
        self._cut_all()
        with self._lock:
            parked, self._parked = self._parked, set()
        for sock in parked:
            _reset(sock)
        self._wake_reader.close()
        self._wake_writer.close()

    def _stop_accepting(self) -> None:
        acceptor, listener = self._acceptor, self._listener
        if acceptor is None or listener is None:
            return
        self._wake_writer.send(b"x")
        acceptor.join()
        self._wake_reader.recv(16)
        listener.close()
        self._acceptor = self._listener = None

    def _cut_all(self) -> None:
        """Cut every relay and wait for its threads. Callers first make sure no new
        relay can start (the acceptor stopped, or hanging set under the lock)."""
        with self._lock:
            relays, self._relays = self._relays, set()
        for relay in relays:
            relay.cut()
        for relay in relays:
            relay.join()

    def _forget(self, relay: _Relay) -> None:
        with self._lock:
            self._relays.discard(relay)

    def _accept_loop(self, listener: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_reader in ready:
                    return
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                self._admit(client)

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            if self._hang:
                self._parked.add(client)
                return
        try:
            upstream = socket.create_connection(self._upstream)
        except OSError:
            _reset(client)
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._hang:  # hang() ran while we connected upstream
                self._parked.add(client)
                upstream.close()
                return
            relay = _Relay(client, upstream, self._forget)
            self._relays.add(relay)
            relay.start()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a crashed server would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


class S3Server:
    """A running S3 endpoint; made by :func:`running_s3_server`.

    ``endpoint`` goes through the gate (affected by :meth:`pause`);
    ``backend_endpoint`` reaches moto directly (for setup while paused, or for
    benchmarks that want no relay in the way). moto accepts any credentials; use
    ``access_key`` / ``secret_key`` / ``region`` so signatures are well formed.
    """

    access_key: Final = ACCESS_KEY
    secret_key: Final = SECRET_KEY
    region: Final = REGION

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._buckets: list[str] = []
        app = _serialise_conditional_writes(DomainDispatcherApplication(create_backend_app))
        self._server: BaseWSGIServer = make_server(
            host, 0, app, threaded=True, request_handler=_QuietHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="moto-s3", daemon=True
        )
        self._thread.start()
        backend_port = self._server.socket.getsockname()[1]
        self.backend_endpoint = _url(host, backend_port)
        self._gate = _Gate(host, (host, backend_port))
        try:
            self._gate.open()
        except BaseException:
            self._shutdown_server()
            raise
        self.endpoint = _url(host, self._gate.port)
        self._stopped = False
        self._admin: S3Client | None = None

    def client(self, *, direct: bool = False, **config: Any) -> S3Client:
        """A boto3 S3 client for this server (through the gate unless ``direct``);
        ``config`` goes to :class:`botocore.config.Config`."""
        settings: dict[str, Any] = {"s3": {"addressing_style": "path"}, **config}
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.backend_endpoint if direct else self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(**settings),
        )

    def _admin_client(self) -> S3Client:
        if self._admin is None:
            self._admin = self.client(direct=True)
        return self._admin

    def create_bucket(self, name: str) -> None:
        """Create a bucket (removed again with its objects at :meth:`stop`)."""
        self._admin_client().create_bucket(Bucket=name)
        self._buckets.append(name)

    def pause(self, *, hang: bool = False) -> None:
        """Take the endpoint down: connections are refused (or, with ``hang``,
        accepted and never answered) and every open connection is cut. moto and its
        objects stay as they are."""
        if hang:
            self._gate.hang()
        else:
            self._gate.refuse()

    def resume(self) -> None:
        """Bring the endpoint back on the same port, objects intact."""
        self._gate.open()

    def stop(self) -> None:
        """Remove the buckets made here, close the gate, stop moto's server and wait
        for its threads. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for bucket in self._buckets:
                _remove_bucket(self._admin_client(), bucket)
        finally:
            if self._admin is not None:
                self._admin.close()
            self._gate.close()
            self._shutdown_server()

    def _shutdown_server(self) -> None:
        self._server.shutdown()  # serve_forever closes the socket on its way out
        self._thread.join()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _remove_bucket(client: S3Client, bucket: str) -> None:
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [item["Key"] for item in page.get("Contents", []) if "Key" in item]
            for first in range(0, len(keys), 1000):
                client.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": key} for key in keys[first : first + 1000]]},
                )
        for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            if "Key" in upload and "UploadId" in upload:
                client.abort_multipart_upload(
                    Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
        client.delete_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
            raise


@contextlib.contextmanager
def running_s3_server(host: str = "127.0.0.1") -> Iterator[S3Server]:
    """An S3 endpoint on a free port of ``host``, stopped (with what it made) on exit."""
    server = S3Server(host)
    try:
        yield server
    finally:
        server.stop()
