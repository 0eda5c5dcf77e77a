"""What a broker's queues cost (issue #27): disk, memory, file descriptors, restart and
send latency with 8 queues and with many, one message in each.

For each size one standalone broker (``examples/standalone.yaml``'s shape, production
settings) gets ``queues / 8`` topics of 8 queues through the admin API; the lean client
sends one message to each queue, then the official Python producer one more to each
queue of up to OFFICIAL_TOPICS topics spread over all of them (it refreshes the route
of every topic it has sent to every 30 s from its one I/O loop: past a few thousand
topics that refresh starves its sends, which would measure the client, not the
broker); each client sends at least MIN_SENDS messages, in rounds of one a queue, so
the baseline's p99 is a percentile and not the worst of 8 sends; the broker is
restarted. Measured before the sends, after them and after the
restart: the store's bytes on disk (allocated blocks, not file sizes: a preallocated
or sparse file counts for what it holds), the broker's RSS and open file descriptors;
the store's recovery time and the time until the broker is ready again; the send
latency p50/p99/max of each client across all the topics.

The goals of the issue are checked against each size but the smallest (the
baseline): disk at most twice the data written plus 1 KiB a queue (the commit log
counted for its data: its segments are preallocated on purpose, so a full disk is
found before a write, not during one), RSS at most 512 MiB after the restart, recovery
at most 5 s, at most 1,000 open file descriptors, send p99 at most 1.5x the
baseline's p99 and the worst send under 1 s; route lookups and heartbeats (LOOKUPS
of each, with every queue in place) at most 1.5x the baseline's p99 too. The paged
admin listings of every topic and every queue are timed, not judged. Reported beside,
not judged: the official sends without each topic's first (which carries the
client's route query: one send in 8 at the larger sizes, one in 800 in the
baseline), when each slow official send started, and the broker's own view of the
same time (:func:`broker_view`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.admin import AdminClient
from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import (
    main_thread_loop_for_the_official_client,
    quiet_official_client,
)

QUEUES_PER_TOPIC = 8
OFFICIAL_TOPICS = 1000
LOOKUPS = 500  # route lookups (and heartbeats) per size
# Sends each client makes at least, whatever the size: the 8-queue baseline's p99 must
# be a percentile, not the worst of its 8 sends (rounds of one message a queue).
MIN_SENDS = 800
SIZES = (8, 1_000, 10_000, 100_000)
BODY = b"x" * 512
GOALS = {
    "disk_ratio_to_data": 2.0,
    "disk_bytes_per_queue": 1024,
    "rss_after_restart_bytes": 512 << 20,
    "recovery_s": 5.0,
    "fds": 1000,
    "p99_ratio_to_8": 1.5,
    "max_send_s": 1.0,
}

Progress = Callable[[str], None]


def scale_cluster(name: str) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "async"},
            },
        }
    )


def allocated_bytes(root: Path) -> int:
    """Bytes the files below ``root`` occupy on disk (their allocated blocks)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def disk_cost(data_dir: Path) -> dict[str, int]:
    """The broker's data on disk: all of it, and the commit log's share."""
    return {
        "disk_bytes": allocated_bytes(data_dir),
        "commitlog_bytes": allocated_bytes(data_dir / "store" / "commitlog"),
    }


def process_cost(pid: int) -> tuple[int, int]:
    """(RSS bytes, open file descriptors) of process ``pid``."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def latency_summary(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"sends": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    ordered = sorted(seconds)
    return {
        "sends": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


BROKER_RPCS = ("SendMessage", "QueryRoute", "Heartbeat")
SLOW_S = (0.1, 1.0)  # the broker-side counts above these


def _histograms(metrics_text: str, family: str, label: str) -> dict[str, dict[str, float]]:
    """``{label value: {"count": n, "sum": s, "le=<bound>": n, ...}}`` of one
    histogram family, summed over its other labels."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name != family:
            continue
        for sample in fam.samples:
            into = out.setdefault(sample.labels.get(label, ""), {})
            key = sample.name.removeprefix(family).lstrip("_")
            if key == "bucket":
                key = f"le={float(sample.labels['le'])}"
            if key in ("count", "sum") or key.startswith("le="):
                into[key] = into.get(key, 0.0) + sample.value
    return out


def broker_view(before: str, after: str) -> dict[str, Any]:
    """What the broker measured itself between two scrapes of its metrics: how many
    of each client RPC it served and how many took over 100 ms and over 1 s inside
    the broker, and its garbage collector's pauses per generation. A send the client
    waited a second for that the broker served in milliseconds was waiting in the
    client or on the way, not in the broker."""

    def delta(family: str, label: str) -> dict[str, dict[str, float]]:
        then, now = _histograms(before, family, label), _histograms(after, family, label)
        return {
            key: {k: v - then.get(key, {}).get(k, 0.0) for k, v in values.items()}
            for key, values in now.items()
        }

    def summary(values: dict[str, float]) -> dict[str, float]:
        count = values.get("count", 0.0)
        row = {"count": int(count), "seconds": round(values.get("sum", 0.0), 3)}
        for bound in SLOW_S:
            within = values.get(f"le={bound}", count)
            row[f"over_{int(bound * 1000)}ms"] = int(count - within)
        return row

    rpcs = delta("rocketmq_rpc_latency", "request_code")
    pauses = delta("rocketcluster_python_gc_pause_seconds", "generation")
    return {
        "rpcs": {rpc: summary(rpcs.get(rpc, {})) for rpc in BROKER_RPCS},
        "gc_pauses": {f"gen{g}": summary(v) for g, v in sorted(pauses.items())},
    }


def topic_names(queues: int) -> list[str]:
    return [f"scale-{i:06d}" for i in range(max(1, queues // QUEUES_PER_TOPIC))]


def _every(progress: Progress, what: str, total: int) -> Callable[[int], None]:
    """A progress line about every 5 s of a long loop."""
    said = [time.monotonic()]

    def tick(done: int) -> None:
        if time.monotonic() - said[0] >= 5.0:
            said[0] = time.monotonic()
            progress(f"  {what}: {done:,} of {total:,}")

    return tick


def rounds(topics: list[str], min_sends: int) -> list[str]:
    """``topics`` repeated until one message a queue in each makes ``min_sends``."""
    per_round = len(topics) * QUEUES_PER_TOPIC
    return topics * max(1, -(-min_sends // per_round))


def _send_lean(
    endpoints: str, topics: list[str], progress: Progress, min_sends: int
) -> list[float]:
    """One message to each queue: 8 sends a topic (the broker takes the queues in
    turn), in rounds up to ``min_sends``; the wall time of each."""

    async def run() -> list[float]:
        took: list[float] = []
        order = rounds(topics, min_sends)
        tick = _every(progress, "lean sends", len(order) * QUEUES_PER_TOPIC)
        async with LeanClient(endpoints) as client:
            for topic in order:
                for _ in range(QUEUES_PER_TOPIC):
                    started = time.perf_counter()
                    entries = await client.send(topic, [OutgoingMessage(BODY)])
                    took.append(time.perf_counter() - started)
                    if entries[0].status.code != pb.Code.OK:
                        raise RuntimeError(f"send to {topic} refused: {entries[0].status}")
                tick(len(took))
        return took

    return asyncio.run(run())


SLOW_SEND_S = 0.1


@dataclass
class OfficialSends:
    took: list[float] = field(default_factory=list)  # every send's wall time
    warm: list[float] = field(default_factory=list)  # sends to a topic whose route it had
    slow: list[dict[str, float]] = field(default_factory=list)  # over SLOW_SEND_S: when


def _send_official(
    endpoints: str, topics: list[str], progress: Progress, min_sends: int
) -> OfficialSends:
    """One message to each queue with the official producer (it takes a topic's
    queues in turn), in rounds up to ``min_sends``; the wall time of each send, route
    lookups included; the same without each topic's first send (the producer queries a
    topic's route before its first send to it); and when each send over SLOW_SEND_S
    started (seconds after the producer's start: its route refresh of every topic runs
    10 s after it, then every 30 s)."""
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.model import Message
    from rocketmq.v5.producer import Producer

    quiet_official_client()
    main_thread_loop_for_the_official_client()
    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=10))
    producer.startup()
    began = time.perf_counter()
    sends = OfficialSends()
    routed: set[str] = set()
    order = rounds(topics, min_sends)
    tick = _every(progress, "official sends", len(order) * QUEUES_PER_TOPIC)
    try:
        for topic in order:
            for _ in range(QUEUES_PER_TOPIC):
                msg = Message()
                msg.topic = topic
                msg.body = BODY
                started = time.perf_counter()
                producer.send(msg)
                seconds = time.perf_counter() - started
                sends.took.append(seconds)
                if topic in routed:
                    sends.warm.append(seconds)
                routed.add(topic)
                if seconds > SLOW_SEND_S:
                    at = round(started - began, 3)
                    sends.slow.append({"at_s": at, "ms": round(seconds * 1000, 1)})
            tick(len(sends.took))
    finally:
        producer.shutdown()
    return sends


def _lookups(endpoints: str, topics: list[str]) -> dict[str, dict[str, float]]:
    """Route lookups and heartbeats with every queue in place: their latency must not
    grow with the broker's queues (a route is its topic's queues; a heartbeat touches
    its client's session only). LOOKUPS of each, over topics spread across all."""

    async def run() -> dict[str, dict[str, float]]:
        spread = topics[:: max(1, len(topics) // LOOKUPS)][:LOOKUPS]
        sample = [spread[i % len(spread)] for i in range(LOOKUPS)]  # the baseline has one
        routes: list[float] = []
        beats: list[float] = []
        async with LeanClient(endpoints) as client:
            await client.query_route(sample[0])  # the connection, not the lookup
            for topic in sample:
                started = time.perf_counter()
                queues = await client.query_route(topic)
                routes.append(time.perf_counter() - started)
                if len(queues) != QUEUES_PER_TOPIC:
                    raise RuntimeError(f"route of {topic}: {len(queues)} queues")
                started = time.perf_counter()
                await client.heartbeat("scale-group")
                beats.append(time.perf_counter() - started)
        return {"route": latency_summary(routes), "heartbeat": latency_summary(beats)}

    return asyncio.run(run())


def _listings(admin: AdminClient, topics: list[str]) -> dict[str, float]:
    """Seconds to read every topic and every queue's offsets through the paged admin
    listings (what `rocketctl topic list` and the operator's drain check read); each
    must hold every topic (and queue) of the bench, beside the broker's own."""
    took: dict[str, float] = {}
    wanted = set(topics)
    for what, read, expected in (
        ("topics_s", admin.topics, len(topics)),
        ("queues_s", admin.queues, len(topics) * QUEUES_PER_TOPIC),
    ):
        started = time.perf_counter()
        rows = read()
        took[what] = round(time.perf_counter() - started, 3)
        ours = sum(1 for row in rows if (row.get("topic") or row.get("name")) in wanted)
        if ours != expected:
            raise RuntimeError(f"{what}: {ours} rows of the bench's topics, not {expected}")
    return took


def run_size(
    work: Path,
    queues: int,
    progress: Progress,
    *,
    official: bool = True,
    min_sends: int = MIN_SENDS,
) -> dict[str, Any]:
    """One size: a broker, its topics, the sends, a restart; every measure."""
    runtime = LocalRuntime(work / f"queues-{queues}")
    state = runtime.up(scale_cluster(f"scale{queues}"))
    try:
        record = state["processes"][0]
        admin = AdminClient(record["addresses"]["admin"])
        store = runtime.directory / "data" / record["name"]  # the broker's data_dir
        topics = topic_names(queues)
        progress(f"{queues:,} queues: creating {len(topics):,} topics")
        started = time.perf_counter()
        tick = _every(progress, "topics", len(topics))
        for i, topic in enumerate(topics):
            admin.create_topic(topic, QUEUES_PER_TOPIC)
            tick(i + 1)
        create_s = time.perf_counter() - started
        rss, fds = process_cost(record["pid"])
        row: dict[str, Any] = {
            "queues": len(topics) * QUEUES_PER_TOPIC,
            "topics": len(topics),
            "create_topics_s": round(create_s, 3),
            "before_sends": {**disk_cost(store), "rss_bytes": rss, "fds": fds},
        }
        metrics_before = admin.metrics()
        progress(f"{queues:,} queues: lean client, one message a queue")
        took = _send_lean(state["clientEndpoints"], topics, progress, min_sends)
        row["lean"] = latency_summary(took)
        if official:
            sample = topics[:: max(1, len(topics) // OFFICIAL_TOPICS)][:OFFICIAL_TOPICS]
            progress(f"{queues:,} queues: official producer, {len(sample):,} topics")
            sends = _send_official(state["clientEndpoints"], sample, progress, min_sends)
            row["official"] = {
                "topics": len(sample),
                **latency_summary(sends.took),
                "warm": latency_summary(sends.warm),
                "slow_sends": sends.slow,
            }
        progress(f"{queues:,} queues: route lookups, heartbeats, admin listings")
        row["lookups"] = _lookups(state["clientEndpoints"], topics)
        row["listings"] = _listings(admin, topics)
        row["broker"] = broker_view(metrics_before, admin.metrics())
        stats = admin.stats()
        data = int(stats["commitLog"]["maxOffset"]) - int(stats["commitLog"]["minOffset"])
        rss, fds = process_cost(record["pid"])
        row["data_bytes"] = data
        row["after_sends"] = {**disk_cost(store), "rss_bytes": rss, "fds": fds}
        admin.close()
        progress(f"{queues:,} queues: restarting the broker")
        started = time.perf_counter()
        runtime.restart(record["name"])
        ready_s = time.perf_counter() - started
        record = runtime.process(record["name"])
        with AdminClient(record["addresses"]["admin"]) as again:
            recovery = again.stats()["recovery"]
        rss, fds = process_cost(record["pid"])
        row["after_restart"] = {**disk_cost(store), "rss_bytes": rss, "fds": fds}
        row["recovery_s"] = round(float(recovery["seconds"]), 3)
        row["ready_after_restart_s"] = round(ready_s, 3)
        return row
    finally:
        runtime.down()


def counted_disk(row: dict[str, Any]) -> int:
    """The store's disk with the commit log counted for its data (the larger of after
    the sends and after the restart)."""
    return max(
        int(at["disk_bytes"]) - int(at["commitlog_bytes"]) + int(row["data_bytes"])
        for at in (row["after_sends"], row["after_restart"])
    )


def judge(rows: list[dict[str, Any]]) -> None:
    """Each row's goals, met or not, against the first (the fewest queues) row, which
    is the baseline and not judged itself (a store's fixed files outweigh its data)."""
    base = rows[0]
    base["goals_met"] = {}
    for row in rows[1:]:
        after = row["after_restart"]
        disk_limit = GOALS["disk_ratio_to_data"] * row["data_bytes"]
        disk_limit += GOALS["disk_bytes_per_queue"] * row["queues"]
        checks = {
            "disk": counted_disk(row) <= disk_limit,
            "rss": after["rss_bytes"] <= GOALS["rss_after_restart_bytes"],
            "recovery": row["recovery_s"] <= GOALS["recovery_s"],
            "fds": max(row["after_sends"]["fds"], after["fds"]) <= GOALS["fds"],
        }
        for client in ("lean", "official"):
            if client in row and client in base and base[client]["p99_ms"] > 0:
                ratio = row[client]["p99_ms"] / base[client]["p99_ms"]
                row[client]["p99_ratio_to_base"] = round(ratio, 3)
                warm, base_warm = row[client].get("warm"), base[client].get("warm")
                if warm and base_warm and base_warm["p99_ms"] > 0:  # reported, not judged
                    warm["p99_ratio_to_base"] = round(warm["p99_ms"] / base_warm["p99_ms"], 3)
                checks[f"{client}_p99"] = ratio <= GOALS["p99_ratio_to_8"]
                checks[f"{client}_max"] = row[client]["max_ms"] <= GOALS["max_send_s"] * 1000
        for lookup in ("route", "heartbeat"):
            mine, theirs = row["lookups"][lookup], base["lookups"][lookup]
            ratio = mine["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] > 0 else 0.0
            mine["p99_ratio_to_base"] = round(ratio, 3)
            checks[f"{lookup}_p99"] = ratio <= GOALS["p99_ratio_to_8"]
        row["goals_met"] = checks


def run_scale_bench(
    work: Path,
    sizes: tuple[int, ...] = SIZES,
    progress: Progress = print,
    *,
    official: bool = True,
    min_sends: int = MIN_SENDS,
) -> dict[str, Any]:
    if not sizes or any(s < QUEUES_PER_TOPIC for s in sizes):
        raise ValueError(f"sizes must be at least {QUEUES_PER_TOPIC} queues, not {sizes}")
    if min_sends < 1:
        raise ValueError(f"min_sends must be at least 1, not {min_sends}")
    rows = [
        run_size(work, size, progress, official=official, min_sends=min_sends)
        for size in sorted(sizes)
    ]
    judge(rows)
    return {
        "goals": GOALS,
        "queues_per_topic": QUEUES_PER_TOPIC,
        "min_sends": min_sends,
        "sizes": rows,
    }


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per size, for the terminal."""
    out = []
    for row in result["sizes"]:
        after = row["after_restart"]
        flat: dict[str, Any] = {
            "queues": row["queues"],
            "data_mb": row["data_bytes"] / 1e6,
            "disk_mb": row["after_sends"]["disk_bytes"] / 1e6,
            "counted_mb": counted_disk(row) / 1e6,
            "rss_mb": after["rss_bytes"] / 1e6,
            "fds": after["fds"],
            "recovery_s": row["recovery_s"],
            "ready_s": row["ready_after_restart_s"],
            "lean_p99_ms": row["lean"]["p99_ms"],
            "lean_max_ms": row["lean"]["max_ms"],
            "route_p99_ms": row["lookups"]["route"]["p99_ms"],
            "heartbeat_p99_ms": row["lookups"]["heartbeat"]["p99_ms"],
            "list_queues_s": row["listings"]["queues_s"],
        }
        if "official" in row:
            flat["official_p99_ms"] = row["official"]["p99_ms"]
            flat["official_max_ms"] = row["official"]["max_ms"]
        missed = [k for k, ok in row["goals_met"].items() if not ok]
        judged = "met" if not missed else "missed: " + ",".join(missed)
        flat["goals"] = judged if row["goals_met"] else "baseline"
        out.append(flat)
    return out
