"""A broker's metrics about its processes: CPU and memory of each (the store process
and every front), and what the fronts' admission saw, summed as one broker's.

Dashboards show a broker as the sum of its processes (``sum by (node_id)``); the
``process`` label tells them apart when one front is hotter than the rest. Read from
``/proc`` and from the fronts' last STATS when Prometheus scrapes, so nothing drifts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rocketcluster.broker.front.supervisor import FrontSupervisor
    from rocketcluster.broker.metrics import BrokerMetrics

STORE_PROCESS = "store"


class ProcessUsage(NamedTuple):
    cpu_seconds: float
    resident_bytes: int


def parse_stat(stat: str, ticks_per_second: int, page_bytes: int) -> ProcessUsage:
    """User plus system CPU and resident memory from a ``/proc/<pid>/stat`` line (the
    command name, in parentheses, may hold spaces: fields are counted after it)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    # Fields 14 (utime), 15 (stime) and 24 (rss) of proc(5); the first here is field 3.
    utime, stime, rss = int(fields[11]), int(fields[12]), int(fields[21])
    return ProcessUsage((utime + stime) / ticks_per_second, rss * page_bytes)


def process_usage(pid: int) -> ProcessUsage | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            line = stat.read()
    except OSError:
        return None  # gone between the listing and the read
    return parse_stat(line, os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE"))


def register_process_metrics(metrics: BrokerMetrics, pids: Callable[[], Mapping[str, int]]) -> None:
    """CPU seconds and resident bytes of every process ``pids`` names (by role)."""

    def usage() -> list[tuple[str, ProcessUsage]]:
        found = []
        for name, pid in sorted(pids().items()):
            used = process_usage(pid)
            if used is not None:
                found.append((name, used))
        return found

    metrics.counter(
        "rocketcluster_process_cpu_seconds",
        "CPU seconds (user and system) of each of the broker's processes",
        lambda: [({"process": n}, u.cpu_seconds) for n, u in usage()],
    )
    metrics.gauge(
        "rocketcluster_process_resident_bytes",
        "Resident memory of each of the broker's processes, in bytes",
        lambda: [({"process": n}, float(u.resident_bytes)) for n, u in usage()],
    )


def register_front_metrics(metrics: BrokerMetrics, fronts: FrontSupervisor) -> None:
    """The client port's gauges as a single process reports them (admission.py),
    summed over the fronts; and the fronts themselves."""

    metrics.gauge(
        "rocketmq_client_connections",
        "Client connections with RPCs in progress (clientLimits.maxConnections)",
        lambda: [({}, float(fronts.connections()))],
    )
    metrics.counter(
        "rocketmq_client_limit_refusals",
        "RPCs refused TOO_MANY_REQUESTS by a client limit",
        lambda: [({"limit": k}, float(v)) for k, v in sorted(fronts.refusals().items())],
    )
    metrics.gauge(
        "rocketcluster_front_processes",
        "Front processes serving the client port, and how many are configured",
        lambda: [
            ({"state": "serving"}, float(fronts.serving)),
            ({"state": "configured"}, float(len(fronts.slots))),
        ],
    )
    metrics.counter(
        "rocketcluster_front_relayed",
        "Calls the front processes handed to the store process (what: calls; "
        "batched_calls, those of an rpc run together; batches, how many runs they made)",
        lambda: [(labels, float(v)) for labels, v in fronts.relayed()],
    )
    metrics.counter(
        "rocketcluster_front_restarts",
        "Front processes started again after one exited",
        lambda: [({}, float(fronts.restarts))],
    )
