"""Console benchmark: how long each page takes to load (p50/p95, ms) over a cluster
with many topics and consumer groups — by default the issue's 200 topics and 100
groups on two broker groups of three replicas and three controllers, every topic
holding a few messages and every consumer group placed on a topic with some lag.

The console runs as `rocketctl console` does, in its own process; pages are fetched
one after another, as a person clicking does, after a warm-up (p50, p95); "cold" is
a load after the console's shared read of the stats topic has expired, as the first
page a person opens after a pause is. The cluster is filled
through the admin API (test sends, offset placements): no client process is needed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.console_cli import free_port, running_console
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, wait_for
from rocketcluster.ctl.workload import Cluster

QUEUES = 2
MESSAGES_PER_TOPIC = 4
STATS_INTERVAL_S = 5
# The console shares one read of the stats topic between pages for at most half a
# stats interval (console/live_stats.py LiveStatsCache): a "cold" load waits that out.
STATS_REUSE_S = STATS_INTERVAL_S / 2
COLD_LOADS = 3


def manifest(topics: int, groups: int, broker_groups: int, replicas: int) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "bench-console"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": broker_groups,
                    "replicas": replicas,
                    "replication": {"mode": "sync" if replicas > 1 else "async"},
                    "statsIntervalSeconds": STATS_INTERVAL_S,
                },
                "topics": [
                    {"name": f"topic-{i:03d}", "queues": QUEUES, "trace": "all"}
                    for i in range(topics)
                ],
                "consumerGroups": [{"name": f"group-{i:03d}"} for i in range(groups)],
            },
        }
    )


def _fill(cluster: Cluster, topics: int, groups: int, say: Callable[[str], None]) -> dict[str, str]:
    """Messages on every topic (through each group's master), every consumer group
    placed one message behind on every queue of one topic; a message id to open."""
    masters = {}
    for group in cluster.local.groups():
        cluster.group = group
        masters[group] = cluster.master()["addresses"]["admin"]
    some_id = ""
    with httpx.Client(timeout=30) as http:
        for i in range(topics):
            for admin in masters.values():
                for m in range(MESSAGES_PER_TOPIC // len(masters) or 1):
                    answer = http.post(
                        cluster.admin_url(admin, f"/v1/topics/topic-{i:03d}/messages"),
                        json={"body": f'{{"order": {m}}}', "keys": [f"k-{i}-{m}"]},
                    )
                    answer.raise_for_status()
                    some_id = some_id or answer.json()["messageId"]
            if i % 50 == 49:
                say(f"  sent to {i + 1} of {topics} topics")
        for g in range(groups):
            topic = f"topic-{g % topics:03d}"
            for admin in masters.values():
                for q in range(QUEUES):
                    top = http.get(
                        cluster.admin_url(admin, f"/v1/topics/{topic}/queues/{q}/messages"),
                        params={"from": 0, "limit": 1},
                    ).json()["maxOffset"]
                    http.put(
                        cluster.admin_url(admin, f"/v1/groups/group-{g:03d}/offsets"),
                        json={"topic": topic, "queueId": q, "offset": max(0, top - 1)},
                    ).raise_for_status()
    return {"messageId": some_id}


def _time_pages(
    url: str, pages: dict[str, str], rounds: int, cold_loads: int, say: Callable[[str], None]
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=url, timeout=60) as http:
        for name, path in pages.items():
            for _ in range(2):  # warm-up: connections, imports, template compilation
                http.get(path).raise_for_status()
            took = []
            for _ in range(rounds):
                started = time.perf_counter()
                answer = http.get(path)
                took.append((time.perf_counter() - started) * 1000)
                answer.raise_for_status()
            took.sort()
            cold = []
            for _ in range(cold_loads):
                time.sleep(STATS_REUSE_S + 0.2)
                started = time.perf_counter()
                http.get(path).raise_for_status()
                cold.append((time.perf_counter() - started) * 1000)
            results[name] = {
                "p50_ms": round(statistics.median(took), 1),
                "p95_ms": round(took[min(len(took) - 1, int(0.95 * len(took)))], 1),
                "max_ms": round(took[-1], 1),
                "cold_ms": round(statistics.median(cold), 1),
                "bytes": len(answer.content),
            }
            row = results[name]
            say(
                f"  {name}: p50 {row['p50_ms']:.0f} ms, p95 {row['p95_ms']:.0f} ms, "
                f"cold {row['cold_ms']:.0f} ms"
            )
    return results


def run_console_bench(
    work_dir: Path,
    *,
    topics: int = 200,
    groups: int = 100,
    broker_groups: int = 2,
    replicas: int = 3,
    rounds: int = 30,
    cold_loads: int = COLD_LOADS,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    runtime = LocalRuntime(work_dir)
    runtime.down()
    model = manifest(topics, groups, broker_groups, replicas)
    say(
        f"starting 3 controllers and {broker_groups}x{replicas} brokers with {topics} topics "
        f"and {groups} consumer groups"
    )
    state = runtime.up(model, overrides={"segment_size": 16 << 20, **DISK_GUARDS_OFF})
    try:
        cluster = Cluster(runtime, state)
        for group in cluster.local.groups():
            cluster.group = group
            cluster.master()
        say("filling it through the admin API")
        ids = _fill(cluster, topics, groups, say)
        time.sleep(11)  # two stats snapshots, so rates and statuses have points
        port = free_port()
        with running_console(work_dir, port):
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: httpx.get(url + "/", timeout=30).status_code == 200, 60)
            t, g = min(7, topics - 1), min(7, groups - 1)
            pages = {
                "overview": "/",
                "topics": "/topics",
                "topic": f"/topics/topic-{t:03d}",
                "browse (queue)": f"/topics/topic-{t:03d}?mode=queue&queue=0&from=0&count=20",
                "browse (key)": f"/topics/topic-{t:03d}?mode=key&key=k-{t}-0",
                "message + trace": f"/messages/{ids['messageId']}",
                "groups": "/groups",
                "group": f"/groups/group-{g:03d}",
                "reports": "/reports",
            }
            say(f"timing {len(pages)} pages, {rounds} loads each")
            results = _time_pages(url, pages, rounds, cold_loads, say)
    finally:
        runtime.down()
    return {
        "topics": topics,
        "consumerGroups": groups,
        "brokerGroups": broker_groups,
        "replicas": replicas,
        "controllers": 3,
        "rounds": rounds,
        "pages": results,
    }
