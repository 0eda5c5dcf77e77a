"""The ``bench cpu`` run: ceilings, the standalone broker, three replicas async and
sync (acknowledging on 2 of 3), lean consume, NATS JetStream R3, failover — each
produce case with the lean and the official client, each figure per process role."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketcluster.ctl.bench.client_bench import TOPIC as BENCH_TOPIC
from rocketcluster.ctl.bench.client_bench import CannedServer, bench_cluster
from rocketcluster.ctl.bench.cpu import roles
from rocketcluster.ctl.bench.cpu.measure import Window, idle_cores, net_of_idle, run_case
from rocketcluster.ctl.bench.cpu.nats import NatsCluster, NatsError, nats_binary
from rocketcluster.ctl.bench.cpu.profile import Profiler
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF
from rocketcluster.ctl.workload import TOPIC as HA_TOPIC
from rocketcluster.ctl.workload import Cluster, ha_cluster, running

CASES = ("ceilings", "standalone", "consume", "async3", "sync3", "fronts", "nats")
PRODUCERS = ("lean_produce", "official_produce")


@dataclass
class Options:
    out_dir: Path
    work_dir: Path
    stamp: str
    seconds: float = 10.0
    warmup: float = 1.0
    cases: tuple[str, ...] = CASES
    profile: bool = False
    kills: int = 5
    profile_prefix: str = "flame"
    idle_seconds: float = 2.0


def _run_on_cluster(
    cluster: Cluster,
    kind: str,
    endpoint: str,
    topic: str,
    opts: Options,
    window: Window | None = None,
    idle: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``kind`` against ``cluster``: figures per role (also net of the ``idle`` burn
    when given), the messages each broker stored in the window, and what the
    controllers recorded meanwhile."""
    pids = roles.role_pids(cluster)
    window = window or Window()
    counts: dict[str, dict[str, int]] = {}

    def ready(_: dict[str, int]) -> None:
        counts["before"] = roles.stored(cluster, pids, topic)

    def done(_: dict[str, int]) -> None:
        counts["after"] = roles.stored(cluster, pids, topic)

    window.on_ready, window.on_done = ready, done
    history = roles.events(cluster)
    result = run_case(
        kind, endpoint, opts.seconds, pids, warmup=opts.warmup, topic=topic, window=window
    )
    result["elections_during_load"] = roles.elections(history, roles.events(cluster))
    before, after = counts.get("before", {}), counts.get("after", {})
    result["stored_in_window"] = {r: after[r] - before[r] for r in after if r in before}
    if idle is not None:
        result["cpu_us_per_msg_net_of_idle"] = net_of_idle(result, idle)
    return result


def _idle(cluster: Cluster, opts: Options, into: dict[str, Any], name: str) -> dict[str, float]:
    """The cluster's idle burn per role (``into[name]``), the client's as none."""
    cores = idle_cores(roles.role_pids(cluster), opts.idle_seconds)
    into[name] = cores
    return cores


def _ceilings(opts: Options) -> dict[str, Any]:
    """The canned server: grpc.aio alone in three shapes, and the official producer
    against an empty handler."""
    canned = CannedServer()
    try:
        pids = {"server": canned.pid}
        out = {
            kind: run_case(kind, canned.endpoint, opts.seconds, pids, warmup=opts.warmup)
            for kind in ("raw_unary", "raw_stream", "raw_fetch", "official_produce")
        }
    finally:
        canned.stop()
    out["empty_handler_official_produce"] = out.pop("official_produce")
    return out


def _standalone(opts: Options, profiles: dict[str, Any], idles: dict[str, Any]) -> dict[str, Any]:
    runtime = LocalRuntime(opts.work_dir / "standalone")
    runtime.down()
    shutil.rmtree(runtime.directory, ignore_errors=True)
    state = runtime.up(bench_cluster("async"), overrides=dict(DISK_GUARDS_OFF))
    out: dict[str, Any] = {}
    try:
        cluster = Cluster(runtime, state)
        endpoint = state["clientEndpoints"]
        idle = _idle(cluster, opts, idles, "standalone")
        if "standalone" in opts.cases:
            for kind in PRODUCERS:
                out[kind] = _run_on_cluster(cluster, kind, endpoint, BENCH_TOPIC, opts, idle=idle)
        if "consume" in opts.cases:
            if "standalone" not in opts.cases:  # a backlog to consume
                _run_on_cluster(cluster, "lean_produce", endpoint, BENCH_TOPIC, opts)
            out["lean_consume"] = _run_on_cluster(
                cluster, "lean_consume", endpoint, BENCH_TOPIC, opts, idle=idle
            )
            if opts.profile:
                _run_on_cluster(cluster, "lean_produce", endpoint, BENCH_TOPIC, opts)  # refill
                profiles["lean_consume"] = _profiled(
                    opts, "lean_consume", ("master", "client"), cluster, endpoint, BENCH_TOPIC
                )
    finally:
        runtime.down()
    return out


def _profiled(
    opts: Options, case: str, who: tuple[str, ...], cluster: Cluster, endpoint: str, topic: str
) -> dict[str, Any]:
    kind = "lean_consume" if case == "lean_consume" else "lean_produce"
    profiler = Profiler(opts.out_dir, case, opts.stamp, who, prefix=opts.profile_prefix)
    run = _run_on_cluster(cluster, kind, endpoint, topic, opts, profiler.window())
    return {
        "files": profiler.files,
        "problems": profiler.problems,
        "msgs_per_s_while_profiled": run["msgs_per_s"],
    }


def _replicated(
    mode: str, opts: Options, profiles: dict[str, Any], idles: dict[str, Any]
) -> dict[str, Any]:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    directory = opts.work_dir / f"three-{mode}"
    shutil.rmtree(directory, ignore_errors=True)
    out: dict[str, Any] = {}
    with running(directory, ha_cluster(mode=mode, name=f"cpu-{mode}")) as cluster:
        pids = roles.role_pids(cluster)
        # Lean straight to the master, as a Kubernetes Service routes (in the kernel);
        # the official client follows its route, to the group endpoint (the proxy).
        master = roles.master_address(cluster, pids, "client")
        endpoints = {"lean_produce": master, "official_produce": cluster.endpoints}
        idle = _idle(cluster, opts, idles, f"three_{mode}")
        for kind in PRODUCERS:
            out[kind] = _run_on_cluster(cluster, kind, endpoints[kind], HA_TOPIC, opts, idle=idle)
        if opts.profile and mode == "sync":
            profiles["sync3"] = _profiled(
                opts, "sync3", ("master", "slave-1", "client"), cluster, master, HA_TOPIC
            )
    return out


def _nats(opts: Options) -> dict[str, Any]:
    binary = nats_binary()
    if binary is None:
        return {"skipped": "nats-server is not installed (make debs installs it)"}
    cluster = NatsCluster(binary)
    try:
        cluster.create_stream()
        return run_case(
            "nats_publish", cluster.servers, opts.seconds, cluster.pids, warmup=opts.warmup
        )
    except NatsError as exc:
        return {"skipped": str(exc)}
    finally:
        cluster.stop()


def run_cpu_bench(opts: Options, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every case in ``opts.cases`` (ceilings first: no broker is up then), then the
    failover kills; ``say`` hears progress."""
    from rocketcluster.ctl.bench.cpu.report import ratios

    result: dict[str, Any] = {
        "options": {
            "seconds": opts.seconds,
            "warmup_s": opts.warmup,
            "cases": list(opts.cases),
            "profile": opts.profile,
            "kills": opts.kills,
        },
        "cases": {},
        "profiles": {},
        "idle_cores": {},
    }
    cases: dict[str, Any] = result["cases"]
    if "ceilings" in opts.cases:
        say("ceilings (canned server)")
        result["ceilings"] = _ceilings(opts)
    if "standalone" in opts.cases or "consume" in opts.cases:
        say("standalone broker")
        standalone = _standalone(opts, result["profiles"], result["idle_cores"])
        for kind, figures in standalone.items():
            cases["lean_consume" if kind == "lean_consume" else f"standalone_{kind}"] = figures
    for mode, name in (("async", "async3"), ("sync", "sync3")):
        if name in opts.cases:
            say(f"three replicas, {mode}")
            for kind, figures in _replicated(
                mode, opts, result["profiles"], result["idle_cores"]
            ).items():
                cases[f"{name}_{kind}"] = figures
    if "fronts" in opts.cases:
        from rocketcluster.ctl.bench.cpu.fronts import run_fronts

        say("front processes: 0, 1, 2 (standalone, sync 2-of-3), 4 official clients")
        result["fronts"] = run_fronts(opts.work_dir, opts.seconds, opts.warmup, say)
    if "nats" in opts.cases:
        say("NATS JetStream R3")
        result["nats_r3"] = _nats(opts)
    if opts.kills:
        from rocketcluster.ctl.bench.replication_bench import failover

        say(f"failover: {opts.kills} master kills")
        result["failover"] = failover(opts.work_dir, opts.kills)
    result["elections_during_load"] = sum(
        c.get("elections_during_load", {}).get("elections", 0) for c in cases.values()
    )
    result["ratios"] = ratios(result)
    return result
