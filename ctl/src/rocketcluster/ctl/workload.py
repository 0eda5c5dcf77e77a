"""A replicated cluster on the local runtime, seen from outside: who is master, what
the controllers say, and an official-client workload that records every
acknowledgement — shared by the failover tests, `rocketctl demo cluster` and the
failover benchmark."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.client.controller_admin import (
    ControllerAdmin,
    ControllerAdminError,
    ControllerUnavailableError,
    Leader,
)
from rocketcluster.api.client.lean import LeanClient
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.tls import ClientTls, admin_scheme, http_verify
from rocketcluster.ctl.client_errors import error_kind
from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.controllers import controller_admin
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, quiet_official_client, wait_for

TOPIC = "orders"


def ha_cluster(*, unclean: bool = False, mode: str = "sync", name: str = "ha") -> RocketCluster:
    """One group of three replicas acknowledging on two, three controllers."""
    return RocketCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": 1,
                    "replicas": 3,
                    "flush": "async",
                    "replication": {
                        "mode": mode,
                        "inSyncReplicas": 2,
                        "minInSyncReplicas": 1,
                        "uncleanElection": unclean,
                    },
                },
                "topics": [{"name": TOPIC, "queues": 4}],
                "consumerGroups": [{"name": "billing"}, {"name": "audit"}],
            },
        }
    )


@dataclass
class Cluster:
    """``group`` of the cluster ``runtime`` started; its admin calls speak https and
    send the admin token when the cluster has security on (``state``'s CA, the
    token in the runtime's directory). ``state`` is ``cluster.json`` as ``up``
    returned it; processes come back as its records (dicts), as the tests take them."""

    runtime: LocalRuntime
    state: dict[str, Any]
    group: str = ""

    def __post_init__(self) -> None:
        if not self.group:
            self.group = f"{self.local.name}-broker-0"

    @property
    def local(self) -> LocalClusterState:
        """``state`` typed (read again each time: a caller may have replaced it)."""
        return LocalClusterState.parse(self.state, str(self.runtime.state_path))

    def _http(self) -> httpx.Client:
        """A client for one call (as httpx.get makes): nothing stays open between the
        polls, and a token or certificate rewritten meanwhile is picked up."""
        token = local_admin_token(self.runtime.directory)
        return httpx.Client(
            timeout=2,
            verify=http_verify(self.local.client_tls()),
            headers={"authorization": f"Bearer {token}"} if token else {},
        )

    def controller_admin(self, timeout: float = 2.0, attempts: int = 1) -> ControllerAdmin:
        """The controllers' admin client (close it). One search for the leader per
        call by default: the callers poll."""
        return controller_admin(self.local, timeout=timeout, attempts=attempts)

    def admin_url(self, address: str, path: str) -> str:
        """``path`` on the admin API at ``address``, with the cluster's scheme."""
        return f"{admin_scheme(self.local.tls)}://{address}{path}"

    def admin_get(self, address: str, path: str, **params: Any) -> Any:
        """GET ``path`` on the admin API at ``address``: the JSON answer (raises
        httpx.HTTPError or ValueError, as the callers expect of a process that is down)."""
        with self._http() as http:
            return http.get(self.admin_url(address, path), params=params).json()

    @property
    def endpoints(self) -> str:
        return self.local.client_endpoints

    def brokers(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.local.brokers(self.group)]

    def controllers(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.local.controllers()]

    def broker_view(self, proc: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.admin_get(proc["addresses"]["admin"], "/v1/broker")  # type: ignore[no-any-return]
        except (httpx.HTTPError, ValueError):
            return None

    def master(self, exclude: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
        def find() -> dict[str, Any] | None:
            for proc in self.brokers():
                if proc["name"] in exclude:
                    continue
                view = self.broker_view(proc)
                if view and view["role"] == "master":
                    return proc
            return None

        return wait_for(find, timeout=60, what="a master")

    def group_view(self) -> dict[str, Any] | None:
        """The group as the controllers' leader sees it; None when none answers (or
        the cluster has none)."""
        if not self.local.controllers():
            return None
        with self.controller_admin() as admin:
            try:
                return admin.group(self.group)
            except ControllerAdminError:
                return None

    def switchover(self, broker_id: int) -> tuple[int, dict[str, Any]]:
        """Ask the controllers' leader to make ``broker_id`` master (what
        ``rocketctl elect --broker-id`` does): the HTTP status and the answer (a
        refusal's answer is ``{"detail": ...}``)."""
        with self.controller_admin(attempts=3) as admin:

            def leader() -> Leader | None:
                try:
                    return admin.leader()
                except ControllerAdminError:
                    return None

            wait_for(leader, timeout=30, what="a controller leader")
            try:
                return 200, admin.elect(self.group, broker_id, timeout=30)
            except ControllerUnavailableError:
                raise
            except ControllerAdminError as exc:
                return exc.status, {"detail": exc.detail}

    def process_of(self, broker_id: int, view: dict[str, Any]) -> dict[str, Any]:
        """The broker process registered as ``broker_id`` in a group ``view``."""
        client = split_registered(view["replicas"][str(broker_id)])[0]
        found = self.local.broker_serving(client, self.group)
        if found is None:
            raise LookupError(f"no broker of {self.group} serves {client}")
        return found.as_dict()

    def wait_in_sync(self, size: int, timeout: float = 120) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            view = self.group_view()
            return view if view and len(view["syncStateSet"]) == size else None

        return wait_for(ok, timeout=timeout, what=f"a SyncStateSet of {size}")

    def heal(self, size: int = 3) -> None:
        """Mend what a test broke, for the next test on the same cluster: paused
        processes resumed, stopped ones started again on their own data and address,
        then every process ready, a master, and ``size`` replicas in sync."""
        alive = {p["name"] for p in self.runtime.running()}
        for proc in (self.runtime.state() or {"processes": []})["processes"]:
            if proc["name"] in alive:
                self.runtime.resume(proc["name"])  # SIGCONT: nothing to a running one
            else:
                self.runtime.restart(proc["name"], wait=False)
        self.runtime.wait_ready()
        self.master()
        self.wait_in_sync(size)


@contextlib.contextmanager
def running(
    directory: Path, cluster: RocketCluster, overrides: dict[str, Any] | None = None
) -> Iterator[Cluster]:
    """``cluster`` up, every group with a master and all its replicas in sync, stopped
    when the block ends; ``overrides`` add broker settings (tunings) to the test
    defaults. (Every group, not the first: a test's producers that start while a
    group still elects meet a cluster its users do not.)"""
    quiet_official_client()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    runtime = LocalRuntime(directory)
    settings = {"segment_size": 16 << 20, **DISK_GUARDS_OFF, **(overrides or {})}
    state = runtime.up(cluster, overrides=settings)
    try:
        handle = Cluster(runtime, state)
        for group in handle.local.groups():
            each = Cluster(runtime, state, group=group)
            each.master()
            each.wait_in_sync(len(each.local.brokers(group)))
        yield handle
    finally:
        runtime.down()


@dataclass
class Workload:
    """Producers that record every acknowledged message and every failure;
    ``credentials`` (access key, secret key) sign their requests and ``tls`` makes
    them connect with tls_enable=True (trusting GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)."""

    endpoints: str
    credentials: tuple[str, str] | None = None
    tls: bool = False
    topic: str = TOPIC
    # FIFO: each producer spreads its messages over this many message groups, in turn
    # (0: no message group, a NORMAL topic).
    message_groups: int = 0
    acked: dict[str, float] = field(default_factory=dict)
    # FIFO: message id -> (message group, its place in the group's acknowledged order)
    fifo_order: dict[str, tuple[str, int]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)  # message id -> broker group
    queues: dict[str, str] = field(default_factory=dict)  # message id -> "<group>.<topic>.<id>"
    failures: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # error text -> count
    sends: list[tuple[float, float]] = field(default_factory=list)  # (acked at, seconds taken)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, producers: int = 2) -> None:
        for w in range(producers):
            t = threading.Thread(target=self._run, args=(w,), daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self, w: int) -> None:
        producer = Producer(
            ClientConfiguration(
                self.endpoints,
                Credentials(*self.credentials) if self.credentials else Credentials(),
                request_timeout=3,
            ),
            (self.topic,),
            tls_enable=self.tls,
        )
        producer.startup()
        sent_in_group: dict[str, int] = {}
        try:
            i = 0
            while not self._stop.is_set():
                msg = Message()
                msg.topic = self.topic
                msg.body = f"w{w}-{i}".encode()
                mgroup = f"w{w}-g{i % self.message_groups}" if self.message_groups else ""
                if mgroup:
                    msg.message_group = mgroup
                i += 1
                started = time.time()
                try:
                    receipt = producer.send(msg)
                    # The client names a queue "<broker group>.<topic>.<queue id>".
                    queue = self.queues[receipt.message_id] = str(receipt.message_queue)
                    self.groups[receipt.message_id] = queue.split(".", maxsplit=1)[0]
                    if mgroup:  # one send at a time per producer: acknowledged in order
                        place = sent_in_group[mgroup] = sent_in_group.get(mgroup, -1) + 1
                        self.fifo_order[receipt.message_id] = (mgroup, place)
                    self.acked[receipt.message_id] = now = time.time()
                    self.sends.append((now, now - started))
                except Exception as exc:
                    self.failures.append(time.time())
                    text = error_kind(exc)
                    self.errors[text] = self.errors.get(text, 0) + 1
        finally:
            producer.shutdown()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def recovery_after(self, t0: float, group: str | None = None) -> float:
        """Client-seen recovery: from the first failure after ``t0`` to the next success
        (on ``group``'s queues when given)."""
        fails = [f for f in self.failures if f >= t0]
        if not fails:
            return 0.0
        first = fails[0]
        later = [
            t
            for mid, t in list(self.acked.items())
            if t > first and (group is None or self.groups.get(mid) == group)
        ]
        return (min(later) - first) if later else float("inf")


def audit(
    endpoints: str,
    group: str,
    want: set[str],
    timeout: float = 120,
    dry_polls: int = 3,
    *,
    tls: ClientTls | None = None,
    credentials: tuple[str, str] | None = None,
    topic: str = TOPIC,
) -> dict[str, set[tuple[str, int, int]]]:
    """Read ``topic`` on every group endpoint with a consumer group until every id in
    ``want`` was seen, and then until ``dry_polls`` polls in a row bring nothing (what
    catches a message delivered twice): id -> {(group endpoint, queue id, queue
    offset)} of its deliveries. ``tls`` and ``credentials`` as LeanClient takes them."""

    async def one(endpoint: str, seen: dict[str, set[tuple[str, int, int]]]) -> None:
        deadline = time.monotonic() + timeout
        empty = 0
        async with LeanClient(endpoint, tls=tls, credentials=credentials) as client:
            while time.monotonic() < deadline and (not want <= set(seen) or empty < dry_polls):
                try:
                    batch = await client.receive(group, topic, batch=64, poll_ms=1000)
                except Exception:
                    await asyncio.sleep(0.5)
                    continue
                empty = 0 if batch else empty + 1
                for msg in batch:
                    sp = msg.system_properties
                    seen.setdefault(sp.message_id, set()).add(
                        (endpoint, sp.queue_id, sp.queue_offset)
                    )
                if batch:
                    await client.ack(group, topic, batch)

    async def run() -> dict[str, set[tuple[str, int, int]]]:
        seen: dict[str, set[tuple[str, int, int]]] = {}
        await asyncio.gather(*(one(e, seen) for e in endpoints.split(";") if e))
        return seen

    return asyncio.run(run())


def produce(endpoints: str, count: int, topic: str = TOPIC) -> list[str]:
    """``count`` orders sent one at a time with the official Producer, shaped as an
    application sends them (a tag, a key, a property): their message ids."""
    producer = Producer(ClientConfiguration(endpoints, Credentials()), (topic,))
    producer.startup()
    ids = []
    try:
        for i in range(count):
            msg = Message()
            msg.topic = topic
            msg.body = f"order #{i}: 3 rockets".encode()
            msg.tag = "created" if i % 2 == 0 else "paid"
            msg.keys = f"order-{i}"
            msg.add_property("region", "eu" if i % 3 else "us")
            ids.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()
    return ids


def consume(
    endpoints: str, expected: int, group: str = "billing", topic: str = TOPIC, timeout: float = 60.0
) -> list[str]:
    """Receive and acknowledge with the official SimpleConsumer until ``expected``
    messages arrived (or ``timeout``): their message ids."""
    consumer = SimpleConsumer(
        ClientConfiguration(endpoints, Credentials()),
        group,
        {topic: FilterExpression()},
        await_duration=5,
    )
    consumer.startup()
    got: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.receive(32, 30):
                consumer.ack(msg)
                got.append(msg.message_id)
    finally:
        consumer.shutdown()
    return got
