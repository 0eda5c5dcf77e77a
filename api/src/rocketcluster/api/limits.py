"""ClientLimits: what one broker lets its clients hold at once on the client port.

Written under ``spec.brokers.clientLimits`` and carried to every broker process
(``BrokerProcessConfig.client_limits``). Every limit answers a request over it with
TOO_MANY_REQUESTS (42900) naming the limit, at once: nothing is queued without bound.

The defaults are meant for production: far above what a healthy client needs (an
official client keeps one connection per broker endpoint, one Telemetry stream, and a
few long-polling receives), low enough that one misbehaving client cannot take a
broker's memory or every handler. Apache RocketMQ's proxy and Kafka leave most of
these unlimited by default and bound memory by the request size alone; here each one
is bounded, with room to spare.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

MIB = 1024 * 1024


class ClientLimits(BaseModel):
    """Per-client limits of the client gRPC port (broker/messaging/admission.py).

    A *connection* is an HTTP/2 connection (gRPC's peer, ``ip:port``) that has at least
    one RPC in progress — the official clients keep a Telemetry stream open on each, so
    that is every live client connection. gRPC Python exposes no accept hook, so the
    limit is enforced on the RPCs of a connection beyond the limit: they are answered
    TOO_MANY_REQUESTS and the connection stays idle until the client gives up on it.
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    max_concurrent_rpcs: int = Field(
        default=50_000,
        ge=1,
        description=(
            "RPCs in progress on the client port, all clients together; beyond it gRPC "
            "refuses a new RPC with RESOURCE_EXHAUSTED before it reaches the broker"
        ),
    )
    max_connections: int = Field(
        default=10_000, ge=1, description="connections with RPCs in progress, all addresses"
    )
    max_connections_per_address: int = Field(
        default=1_000, ge=1, description="connections with RPCs in progress, per client IP"
    )
    max_concurrent_streams: int = Field(
        default=10_000,
        ge=1,
        description=(
            "HTTP/2 streams (RPCs) at once on one connection (grpc.max_concurrent_streams). "
            "Above the topics one client uses: the official clients query every topic's "
            "route at once every 30 s, gRPC's C client opens those streams without "
            "waiting for this limit and the server refuses the excess (REFUSED_STREAM, "
            "which the official clients, with gRPC retries off, report as UNAVAILABLE)"
        ),
    )
    max_connection_idle_seconds: int = Field(
        default=600,
        ge=1,
        description=(
            "a connection without RPCs for this long is closed (grpc.max_connection_idle_ms; "
            "clients reconnect on their next call): idle connections are not counted above, "
            "this bounds the sockets they hold"
        ),
    )
    max_inflight_requests_per_client: int = Field(
        default=1_000,
        ge=1,
        description="RPCs in progress per client id (x-mq-client-id), streams included",
    )
    max_inflight_bytes_per_client: int = Field(
        default=128 * MIB,
        ge=1,
        description=(
            "request bytes held in progress per client id; a client with nothing in "
            "progress always gets one request through, however large (the message size "
            "limits bound that one)"
        ),
    )
