"""RouteTable: the broker groups QueryRoute offers, prepared once per change.

Built from the config's ``route_groups`` until a catalogue names groups, then from the
catalogue: every group it lists, at the endpoint its entry names or, until one of its
brokers registers one, at the config's endpoint for it (a group neither names is left
out), read-only (``Permission.READ``) when its entry says ``writable: false``.
Requests only read it (a dict lookup per group), and a new catalogue replaces it whole.

The set of groups must not shrink while the groups register: a FIFO producer picks a
message group's queue by hashing over the route's queue count, so a route of one group
at start and of two ten seconds later (the clients' first refresh) sends a message
group's later messages to another queue, and a consumer may read them first (the
failover-drain test saw it under load).

Queues are listed queue-major (q0 of every group, then q1 …): the official clients
retry a failed send on the *next* queue of the route, which is then on another group,
so a send that reaches a write-disabled group before the producer's route refresh
(every 30 s) lands on a writable one at its second attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import Catalogue
from rocketcluster.api.topics import TopicSpec

READ_WRITE = int(pb.Permission.READ_WRITE)
READ = int(pb.Permission.READ)


@dataclass(frozen=True, slots=True)
class RouteGroup:
    name: str
    endpoint: str
    writable: bool = True


def broker_pb(name: str, endpoint: str) -> pb.Broker:
    """A group as a route names it: id 0 (the clients only use master queues), at the
    endpoint that follows its master."""
    host, _, port = endpoint.rpartition(":")
    return pb.Broker(
        name=name,
        id=0,
        endpoints=pb.Endpoints(
            scheme=pb.AddressScheme.IPv4 if _is_ipv4(host) else pb.AddressScheme.DOMAIN_NAME,
            addresses=[pb.Address(host=host, port=int(port))],
        ),
    )


class RouteTable:
    """An immutable snapshot: what routes offer, and whether this group takes writes."""

    def __init__(
        self,
        own: RouteGroup,
        groups: Mapping[str, RouteGroup],
        *,
        version: int = 0,
        source: str = "config",
    ) -> None:
        self.own = own
        self.version = version
        self.source = source  # "config", or "catalogue" once one named groups
        self.groups = dict(sorted(groups.items()))
        self._brokers = {g.name: broker_pb(g.name, g.endpoint) for g in self.groups.values()}
        self._own_broker = self._brokers.get(own.name) or broker_pb(own.name, own.endpoint)
        self._permissions = {
            g.name: READ_WRITE if g.writable else READ for g in self.groups.values()
        }
        self.write_refusal: str | None = (
            None
            if own.writable
            else f"the broker[{own.name}] sending message is forbidden: the group is "
            "write-disabled (drained); send to another group's queue"
        )

    @property
    def writable(self) -> bool:
        return self.own.writable

    @classmethod
    def from_config(cls, config: BrokerProcessConfig) -> RouteTable:
        groups = config.route_groups or {config.group: config.route_endpoint}
        own = RouteGroup(config.group, groups.get(config.group, config.route_endpoint))
        return cls(own, {name: RouteGroup(name, endpoint) for name, endpoint in groups.items()})

    @classmethod
    def from_catalogue(
        cls, config: BrokerProcessConfig, catalogue: Catalogue, *, own_writable: bool = True
    ) -> RouteTable:
        """The catalogue's groups, each at its registered endpoint or else the
        config's; the config's ``route_groups`` while the catalogue names no endpoint
        (the controllers learn endpoints as brokers register). This group's write
        flag comes from its entry, or stays ``own_writable`` (the last one known)
        while it has none."""
        entries = catalogue.groups
        fallback = config.route_groups or {config.group: config.route_endpoint}
        if any(e.endpoint for e in entries.values()):
            groups = {
                n: RouteGroup(n, endpoint, e.writable)
                for n, e in entries.items()
                if (endpoint := e.endpoint or fallback.get(n, ""))
            }
            source = "catalogue"
        else:
            groups = {
                n: RouteGroup(n, ep, entries[n].writable if n in entries else True)
                for n, ep in fallback.items()
            }
            source = "config"
        entry = entries.get(config.group)
        writable = entry.writable if entry is not None else own_writable
        mine = groups.get(config.group)
        own = RouteGroup(config.group, mine.endpoint if mine else config.route_endpoint, writable)
        return cls(own, groups, version=catalogue.version, source=source)

    # -- what requests read --------------------------------------------------------

    def broker(self, group: str | None = None) -> pb.Broker:
        if group is None or group == self.own.name:
            return self._own_broker
        return self._brokers.get(group) or self._own_broker

    def permission(self, group: str | None = None) -> int:
        if group is None or group == self.own.name:
            return READ_WRITE if self.own.writable else READ
        return self._permissions.get(group, READ_WRITE)

    def endpoints(self) -> dict[str, str]:
        return {g.name: g.endpoint for g in self.groups.values()}

    def message_queues(
        self, topic: TopicSpec, namespace: str, accepted: list[int]
    ) -> list[pb.MessageQueue]:
        """A queue per group and queue id, queue-major (see the module docstring)."""
        resource = pb.Resource(resource_namespace=namespace, name=topic.name)
        return [
            pb.MessageQueue(
                topic=resource,
                id=q,
                permission=self._permissions[name],
                broker=self._brokers[name],
                accept_message_types=accepted,
            )
            for q in range(topic.queues)
            for name in self.groups
        ]

    def describe(self) -> dict[str, dict[str, object]]:
        return {n: {"endpoint": g.endpoint, "writable": g.writable} for n, g in self.groups.items()}


def _is_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and 0 <= int(p) < 256 for p in parts)
