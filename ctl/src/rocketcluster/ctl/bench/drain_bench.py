"""Where an official consumer's time goes while it drains a backlog (issue #25).

One SimpleConsumer of the official Python client drains a backlog the way an
application's loop does — ``receive(32)``, then ``ack`` each message, one call each —
on ``examples/cluster.yaml``'s shape (two broker groups of three replicas, sync on
two). Three cases:

- ``balanced``: the backlog spread over both groups;
- ``one-group``: all of it on one group, what a failover leaves behind (the other
  group took the traffic meanwhile) — the client picks a group per receive;
- ``one-group-no-cross``: the same with ``messaging.crossGroupReceive: false`` (a second
  cluster), the behaviour before issue #25: receives at the drained group wait out
  their long poll.

For each: messages per second; per message, the client's wall time in ``receive`` and
in ``ack``, against the time the masters spent answering those RPCs (their
``rocketmq_rpc_latency`` sums: an ack's includes replicating the POP journal record
to the in-sync slave; an ack passed on to the group that delivered the message counts
at both masters, the asking one's time including the hop and the other's answer);
the empty receives and the seconds spent in them; the
messages another group answered for (cross-group receives); and CPU per message of the
client process and of all brokers. What is left of the client's wall time once the
brokers' share is taken out is the client library, gRPC and the network hop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.bench.client_bench import _cpu_seconds
from rocketcluster.ctl.testing import main_thread_loop_for_the_official_client
from rocketcluster.ctl.workload import Cluster, running

BODY = os.urandom(1024)
AWAIT_S = 3  # the consumer: await_duration=3, receive(32, 30)
BATCH = 32
INVISIBLE_S = 30
CASES = ("balanced", "one-group", "one-group-no-cross")


def drain_cluster(name: str) -> RocketCluster:
    """examples/cluster.yaml's shape; a topic and a consumer group per case (a new
    group starts at a topic's first message: each case drains only its backlog)."""
    return RocketCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": 2,
                    "replicas": 3,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                },
                "topics": [{"name": f"drain-{c}", "queues": 4} for c in CASES],
                "consumerGroups": [{"name": f"drain-{c}"} for c in CASES],
            },
        }
    )


async def _fill(endpoints: dict[str, str], topic: str, per_group: dict[str, int]) -> int:
    """``per_group[g]`` messages sent to group ``g``'s endpoint (lean client, batches)."""
    sent = 0
    for group, count in per_group.items():
        async with LeanClient(endpoints[group]) as client:
            left = count
            while left > 0:
                batch = [OutgoingMessage(BODY) for _ in range(min(BATCH, left))]
                entries = await client.send(topic, batch)
                ok = sum(1 for e in entries if e.status.code == 20000)
                sent += ok
                left -= ok
    return sent


def _scrape(cluster: Cluster) -> dict[str, float]:
    """Summed over every broker: RPC latency sums and counts by RPC and code, and the
    cross-group counters."""
    out: dict[str, float] = {}
    for proc in cluster.state["processes"]:
        if proc["role"] != "broker":
            continue
        try:
            text = httpx.get(
                cluster.admin_url(proc["addresses"]["admin"], "/metrics"), timeout=5
            ).text
        except httpx.HTTPError:
            continue
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in ("rocketmq_rpc_latency_sum", "rocketmq_rpc_latency_count"):
                    key = f"{s.name[21:]}:{s.labels['request_code']}:{s.labels['response_code']}"
                elif s.name == "rocketmq_cross_group_received_messages_total":
                    key = "cross_group_received"
                elif s.name == "rocketmq_cross_group_passed_on_total":
                    key = "cross_group_passed_on"
                else:
                    continue
                out[key] = out.get(key, 0.0) + s.value
    return out


def _brokers_cpu(cluster: Cluster) -> float:
    total = 0.0
    for proc in cluster.state["processes"]:
        if proc["role"] == "broker":
            with suppress(OSError):
                total += _cpu_seconds(int(proc["pid"]))
    return total


@contextmanager
def _measured(cluster: Cluster, into: dict[str, Any]) -> Iterator[None]:
    before, brokers, client = _scrape(cluster), _brokers_cpu(cluster), _cpu_seconds(os.getpid())
    yield
    after = _scrape(cluster)
    into["broker"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    into["brokers_cpu_s"] = _brokers_cpu(cluster) - brokers
    into["client_cpu_s"] = _cpu_seconds(os.getpid()) - client


def _official_drain(cluster: Cluster, name: str, want: int) -> dict[str, Any]:
    """The application's loop over consumer group and topic ``name`` until ``want``
    messages came."""
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression

    main_thread_loop_for_the_official_client()
    consumer = SimpleConsumer(
        ClientConfiguration(cluster.endpoints, Credentials(), request_timeout=3),
        name,
        {name: FilterExpression()},
        await_duration=AWAIT_S,
    )
    consumer.startup()
    got = receives = empty = 0
    receive_s = ack_s = empty_s = 0.0
    figures: dict[str, Any] = {}
    try:
        with _measured(cluster, figures):
            began = time.perf_counter()
            while got < want and time.perf_counter() - began < 600:
                t0 = time.perf_counter()
                messages = consumer.receive(BATCH, INVISIBLE_S)
                t1 = time.perf_counter()
                receives += 1
                receive_s += t1 - t0
                if not messages:
                    empty += 1
                    empty_s += t1 - t0
                for message in messages:
                    consumer.ack(message)
                ack_s += time.perf_counter() - t1
                got += len(messages)
            elapsed = time.perf_counter() - began
    finally:
        consumer.shutdown()
    b: dict[str, float] = figures["broker"]

    def broker_ms(rpc: str, code: str = "20000") -> float:
        return 1000 * b.get(f"sum:{rpc}:{code}", 0.0) / max(1, got)

    per_msg = {
        "receive_ms": 1000 * receive_s / max(1, got),
        "ack_ms": 1000 * ack_s / max(1, got),
        "broker_receive_ms": broker_ms("ReceiveMessage") + broker_ms("ReceiveMessage", "40401"),
        "broker_ack_ms": broker_ms("AckMessage"),
    }
    per_msg["client_and_transport_ms"] = (
        per_msg["receive_ms"]
        + per_msg["ack_ms"]
        - per_msg["broker_receive_ms"]
        - per_msg["broker_ack_ms"]
    )
    return {
        "messages": got,
        "seconds": elapsed,
        "msgs_per_s": got / elapsed,
        "receives": receives,
        "empty_receives": empty,
        "empty_receive_s": empty_s,
        "cross_group_messages": int(b.get("cross_group_received", 0.0)),
        "acks_passed_on": int(b.get("cross_group_passed_on", 0.0)),
        "acks": int(b.get("count:AckMessage:20000", 0.0)),
        "per_message": per_msg,
        "client_cpu_us_per_msg": 1e6 * figures["client_cpu_s"] / max(1, got),
        "brokers_cpu_us_per_msg": 1e6 * figures["brokers_cpu_s"] / max(1, got),
    }


def _case(cluster: Cluster, case: str, messages: int) -> dict[str, Any]:
    endpoints = dict(cluster.state["groupEndpoints"])
    groups = sorted(endpoints)
    if case == "balanced":
        split = {g: messages // len(groups) for g in groups}
    else:
        split = {groups[-1]: messages}
    asyncio.run(_fill(endpoints, f"drain-{case}", split))
    return {"backlog": split, **_official_drain(cluster, f"drain-{case}", sum(split.values()))}


def run_drain_bench(
    work_dir: Path, messages: int = 3000, cases: tuple[str, ...] = CASES
) -> dict[str, Any]:
    unknown = set(cases) - set(CASES)
    if unknown:
        raise ValueError(f"unknown cases {sorted(unknown)}: choose from {', '.join(CASES)}")
    logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)
    results: dict[str, Any] = {"messages_per_case": messages, "cases": {}}
    for cross in (True, False):
        chosen = [c for c in cases if c.endswith("-no-cross") != cross]
        if not chosen:
            continue
        name = "drain" if cross else "drain-off"
        overrides = None if cross else {"messaging": {"crossGroupReceive": False}}
        with running(work_dir / name, drain_cluster(name), overrides) as cluster:
            for case in chosen:
                results["cases"][case] = _case(cluster, case, messages)
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for case, r in results["cases"].items():
        pm = r["per_message"]
        out.append(
            {
                "case": case,
                "msgs_per_s": r["msgs_per_s"],
                "empty": r["empty_receives"],
                "empty_s": r["empty_receive_s"],
                "cross_group": r["cross_group_messages"],
                "passed_on": r["acks_passed_on"],
                "receive_ms": pm["receive_ms"],
                "ack_ms": pm["ack_ms"],
                "broker_rcv_ms": pm["broker_receive_ms"],
                "broker_ack_ms": pm["broker_ack_ms"],
                "client_ms": pm["client_and_transport_ms"],
                "client_cpu_us": r["client_cpu_us_per_msg"],
                "brokers_cpu_us": r["brokers_cpu_us_per_msg"],
            }
        )
    return out
