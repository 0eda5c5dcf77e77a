"""The client port's gRPC server: one per single-process broker, one per front process.

Both serve MessagingService and ConsumeService behind the same admission (client
limits) and auth; they differ in what answers (the servicers, or a front's relay to
its store process) and in whether the port is shared: fronts bind it together
(``SO_REUSEPORT``, the kernel spreads connections over them), a single process alone
(a second broker on the same port must fail to start, not share it).
"""

from __future__ import annotations

from typing import Any

import grpc

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.limits import ClientLimits
from rocketcluster.api.tls import add_port
from rocketcluster.broker.messaging.admission import ClientAdmission, server_options
from rocketcluster.broker.messaging.consume_service import guarded_consume_handler
from rocketcluster.broker.security import guard_servicer, users_source
from rocketcluster.broker.security.guard import Observe


class BindError(RuntimeError):
    pass


def client_server(
    cfg: BrokerProcessConfig, limits: ClientLimits, *, shared_port: bool
) -> grpc.aio.Server:
    return grpc.aio.server(  # no interceptors: see ClientAdmission
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
        options=[
            ("grpc.so_reuseport", 1 if shared_port else 0),
            *server_options(limits, cfg.max_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ],
    )


def add_services(
    server: grpc.aio.Server,
    cfg: BrokerProcessConfig,
    admission: ClientAdmission,
    messaging: Any,
    consume: Any,
    observe: Observe | None,
    *,
    relay: bool = False,
) -> None:
    """MessagingService (``messaging``) and ConsumeService (``consume``) on ``server``,
    admission first, then auth when it is on (one users source for both). ``relay``: a
    front process's servicers, which answer with bytes and, when no auth check needs
    the requests' fields, take them as bytes too (the store process decodes them)."""
    users = users_source(cfg.auth) if cfg.auth.enabled else None
    guarded = guard_servicer(messaging, cfg.auth, observe, users=users)
    raw = relay and not cfg.auth.enabled
    server.add_generic_rpc_handlers(
        (
            admission.handler(guarded, raw_replies=relay, raw_requests=raw),
            guarded_consume_handler(
                consume, cfg.auth, admission, observe, users, raw_replies=relay, raw_requests=raw
            ),
        )
    )


def bind(server: grpc.aio.Server, cfg: BrokerProcessConfig) -> str:
    """Listen on the client port; the address, or BindError."""
    address = f"{cfg.bind_host}:{cfg.client_port}"
    try:
        # Server authentication only: the official clients present no certificate.
        port = add_port(server, address, cfg.tls, mutual=False)
    except RuntimeError as exc:
        raise BindError(f"cannot listen on {address}: {exc}") from exc
    if port == 0:
        raise BindError(f"cannot listen on {address} (in use?)")
    return address
