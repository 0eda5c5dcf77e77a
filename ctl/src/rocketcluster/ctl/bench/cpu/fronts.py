"""The front-process cases of ``bench cpu`` (issue #28): what each process of a broker
spends per official message with 0, 1 and 2 front processes, and what that projects
to on pods with more cores than this machine has.

For each shape (a standalone broker; three replicas acknowledging on two) and each
front count, four official client processes produce (one message per SendMessage, as
applications send) and then four consume with POP (SimpleConsumer, 32 per receive, one
AckMessage per message). Every process is a role of its own: ``master`` is the store
process, ``master-front-0`` … its fronts, ``slave-1`` … (and their fronts), the
controllers, the local group endpoint, each client.

On two shared cores the rates say little about a bigger pod; the CPU each process
spends per message does. ``projection`` turns it into messages/s on a pod of C cores:
the store process is one event loop (it can use one core), the fronts share the rest,

    rate(C) = min(1e6 / store_us, (C - 1) * 1e6 / fronts_us)     (fronts > 0)
    rate(C) = 1e6 / broker_us                                    (one process)

where ``store_us`` is the store process's µs per message and ``fronts_us`` all its
fronts' together (a front's cost per call does not depend on how many fronts there
are). Slaves run in pods of their own, clients elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.broker.front.launch import FRONT_MODULE_ENV
from rocketcluster.ctl.bench.client_bench import GROUP, OFFICIAL_INFLIGHT, TOPIC
from rocketcluster.ctl.bench.cpu import roles
from rocketcluster.ctl.bench.cpu.measure import cpu_of, run_case
from rocketcluster.ctl.bench.cpu.store_feed import FEED_DIR_ENV
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF
from rocketcluster.ctl.workload import Cluster

FRONT_COUNTS = (0, 1, 2)
SHAPES = ("standalone", "sync3")
CLIENTS = 4
PROJECTED_CORES = (2, 4, 8, 16)
BACKLOG_S = 4.0  # lean sends before the consume case, so it never runs dry


def shape_cluster(shape: str, fronts: int) -> RocketCluster:
    brokers: dict[str, Any] = {"groups": 1, "flush": "async", "frontProcesses": fronts}
    if shape == "standalone":
        brokers["replicas"] = 1
        controllers = 0
    else:
        brokers["replicas"] = 3
        brokers["replication"] = {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1}
        controllers = 3
    return RocketCluster.model_validate(
        {
            "metadata": {"name": f"fronts-{shape}-{fronts}"},
            "spec": {
                "controller": {"replicas": controllers},
                "brokers": brokers,
                "topics": [{"name": TOPIC, "queues": 8}],
                "consumerGroups": [{"name": GROUP}],
            },
        }
    )


def front_roles(cluster: Cluster, pids: dict[str, int]) -> dict[str, int]:
    """``pids`` and every broker's fronts, named after their broker's role."""
    out = dict(pids)
    by_pid = {pid: role for role, pid in pids.items()}
    for proc in roles.brokers(cluster):
        role = by_pid.get(int(proc["pid"]))
        if role is None:
            continue
        for n, pid in enumerate(cluster.runtime.front_pids(str(proc["name"]))):
            out[f"{role}-front-{n}"] = pid
    return out


def run_shape(
    shape: str,
    fronts: int,
    work_dir: Path,
    seconds: float,
    warmup: float,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Official produce, then official POP consume, on ``shape`` with ``fronts``."""
    directory = work_dir / f"fronts-{shape}-{fronts}"
    shutil.rmtree(directory, ignore_errors=True)
    runtime = LocalRuntime(directory)
    state = runtime.up(
        shape_cluster(shape, fronts), overrides={"segment_size": 16 << 20, **DISK_GUARDS_OFF}
    )
    try:
        cluster = Cluster(runtime, state)
        if shape != "standalone":
            cluster.master()
            cluster.wait_in_sync(3)
        pids = front_roles(cluster, roles.role_pids(cluster))
        endpoint = str(state["clientEndpoints"])
        out: dict[str, Any] = {"fronts": fronts, "roles": sorted(pids)}
        say(f"  {shape}, {fronts} fronts: official produce, {CLIENTS} clients")
        out["official_produce"] = run_case(
            "official_produce", endpoint, seconds, pids, warmup=warmup, clients=CLIENTS
        )
        run_case("lean_produce", endpoint, BACKLOG_S, pids, warmup=0)
        say(f"  {shape}, {fronts} fronts: official POP consume, {CLIENTS} clients")
        out["official_consume"] = run_case(
            "official_consume", endpoint, seconds, pids, warmup=warmup, clients=CLIENTS
        )
        return out
    finally:
        runtime.down()


FEED_MODULE = "rocketcluster.ctl.bench.cpu.store_feed"
FEED_INFLIGHT = CLIENTS * OFFICIAL_INFLIGHT  # what the four official clients keep in flight
FEED_WAIT_S = 120.0


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the store feeder wrote no {path.name} in {timeout:.0f} s")
        time.sleep(0.01)


def run_fed(
    shape: str,
    work_dir: Path,
    seconds: float,
    warmup: float,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """The store process of ``shape``'s master fed by ``store_feed`` in place of its one
    front: its CPU per official message when fronts keep it busy (and the slaves')."""
    directory = work_dir / f"fed-{shape}"
    shutil.rmtree(directory, ignore_errors=True)
    feed_dir = directory / "feed"
    feed_dir.mkdir(parents=True)
    runtime = LocalRuntime(directory)
    say(f"  {shape}: the store process fed by {FEED_INFLIGHT} calls in flight")
    with _environment(**{FRONT_MODULE_ENV: FEED_MODULE, FEED_DIR_ENV: str(feed_dir)}):
        state = runtime.up(
            shape_cluster(shape, 1), overrides={"segment_size": 16 << 20, **DISK_GUARDS_OFF}
        )
    try:
        cluster = Cluster(runtime, state)
        if shape != "standalone":
            cluster.master()
            cluster.wait_in_sync(3)
        pids = roles.role_pids(cluster)
        master = pids["master"]
        spec = {"topic": TOPIC, "seconds": seconds, "warmup": warmup, "inflight": FEED_INFLIGHT}
        (feed_dir / str(master)).write_text(json.dumps(spec))
        _wait_file(feed_dir / f"{master}.measuring", FEED_WAIT_S)
        before = cpu_of(pids)
        _wait_file(feed_dir / f"{master}.result", FEED_WAIT_S + seconds)
        after = cpu_of(pids)
        result: dict[str, Any] = json.loads((feed_dir / f"{master}.result").read_text())
        messages = max(1, int(result["messages"]))
        result["cpu_us_per_msg"] = {
            r: (after[r] - before[r]) * 1e6 / messages for r in before if r in after
        }
        return result
    finally:
        runtime.down()


def broker_us(case: dict[str, Any], broker: str = "master") -> tuple[float, float]:
    """(store process µs, all its fronts' µs) per message of ``broker``."""
    us = case["cpu_us_per_msg"]
    fronts = sum(v for r, v in us.items() if r.startswith(f"{broker}-front-"))
    return float(us.get(broker, 0.0)), fronts


def projected_rate(store_us: float, fronts_us: float, cores: int) -> float:
    """Messages/s a broker pod of ``cores`` sustains (the module's formula)."""
    if store_us <= 0:
        return 0.0
    if fronts_us <= 0:
        return 1e6 / store_us
    return min(1e6 / store_us, max(0, cores - 1) * 1e6 / fronts_us)


def projection(cases: dict[str, Any], fed: dict[str, Any] | None = None) -> dict[str, Any]:
    """For each shape and load: the per-role figures of the largest front count
    measured, the single process beside it, and the rate each projects on 2-16 cores;
    for produce also with the store process's cost when fed at full rate (``fed``),
    which is what it costs in a pod whose fronts keep it busy."""
    fed = fed or {}
    out: dict[str, Any] = {}
    for shape in SHAPES:
        for load in ("official_produce", "official_consume"):
            with_fronts = [
                cases[f"{shape}_fronts{k}"][load]
                for k in FRONT_COUNTS
                if k and load in cases.get(f"{shape}_fronts{k}", {})
            ]
            single = cases.get(f"{shape}_fronts0", {}).get(load)
            if not with_fronts or single is None:
                continue
            store_us, fronts_us = broker_us(with_fronts[-1])
            single_us, _ = broker_us(single)
            out[f"{shape}_{load}"] = {
                "store_process_us_per_msg": store_us,
                "fronts_us_per_msg": fronts_us,
                "single_process_us_per_msg": single_us,
                "msgs_per_s_by_cores": {
                    str(c): projected_rate(store_us, fronts_us, c) for c in PROJECTED_CORES
                },
                "single_process_msgs_per_s": projected_rate(single_us, 0.0, 1),
            }
            busy = fed.get(shape)
            if load == "official_produce" and busy:
                busy_us = float(busy["store_us_per_msg"])
                out[f"{shape}_{load}"]["store_process_us_per_msg_fed"] = busy_us
                out[f"{shape}_{load}"]["msgs_per_s_by_cores_fed"] = {
                    str(c): projected_rate(busy_us, fronts_us, c) for c in PROJECTED_CORES
                }
    return out


def run_fronts(
    work_dir: Path, seconds: float, warmup: float, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    fed: dict[str, Any] = {}
    for shape in SHAPES:
        for fronts in FRONT_COUNTS:
            cases[f"{shape}_fronts{fronts}"] = run_shape(
                shape, fronts, work_dir, seconds, warmup, say
            )
        fed[shape] = run_fed(shape, work_dir, seconds, warmup, say)
    return {
        "clients": CLIENTS,
        "cases": cases,
        "store_fed": fed,
        "projection": projection(cases, fed),
    }
