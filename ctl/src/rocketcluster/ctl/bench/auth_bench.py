"""What security.auth costs a producer: the same broker (standalone, async flush) with
auth off and on, driven by the lean client (signed like the official clients when
auth is on), in two shapes — one message per SendMessage at 64 in flight (the official
client's shape: the per-request cost of the check shows most) and batches of 32 at 16
in flight — plus the check alone in this process (a verified header from the cache,
and a new one with its HMAC).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.users import Action
from rocketcluster.broker.security.auth import Authenticator, Kind, require, sign
from rocketcluster.ctl.bench.client_bench import BODY, TOPIC, _drive, _percentiles
from rocketcluster.ctl.local.auth import users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF

USER = "bench"
SHAPES = {"single_64": (1, 64), "batch32_16": (32, 16)}


def auth_cluster(auth: bool) -> RocketCluster:
    spec: dict[str, Any] = {
        "controller": {"replicas": 0},
        "brokers": {"groups": 1, "replicas": 1, "flush": "async"},
        "topics": [{"name": TOPIC, "queues": 8}],
    }
    if auth:
        spec["security"] = {"auth": {"enabled": True}}
        spec["users"] = [{"name": USER, "permissions": [{"topic": TOPIC, "actions": ["pub"]}]}]
    return RocketCluster.model_validate(
        {"metadata": {"name": f"bench-auth-{'on' if auth else 'off'}"}, "spec": spec}
    )


async def _produce(
    endpoint: str, seconds: float, batch: int, inflight: int, credentials: tuple[str, str] | None
) -> dict[str, Any]:
    async with LeanClient(endpoint, credentials=credentials) as client:
        await client.send(TOPIC, [OutgoingMessage(BODY)])  # connected, route warm

        async def one() -> int:
            entries = await client.send(TOPIC, [OutgoingMessage(BODY) for _ in range(batch)])
            return sum(1 for e in entries if e.status.code == 20000)

        started = time.perf_counter()
        messages, errors, latencies = await _drive(one, inflight, started + seconds)
        elapsed = time.perf_counter() - started
    return {
        "messages": messages,
        "msgs_per_s": messages / elapsed,
        "errors": errors,
        **_percentiles(latencies),
    }


def check_cost(rounds: int = 200_000) -> dict[str, float]:
    """Microseconds per check in this process: cached (the usual case: a client signs
    once a second) and uncached (parse + HMAC-SHA1 + compare_digest)."""
    from rocketcluster.api.auth import UserCredentials
    from rocketcluster.api.users import PermissionSpec

    user = UserCredentials(
        access_key=USER,
        secret_key="k" * 43,
        permissions=[PermissionSpec.model_validate({"topic": TOPIC, "actions": ["pub"]})],
    )
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    header = (
        f"MQv2-HMAC-SHA1 Credential={USER}, SignedHeaders=x-mq-date-time, "
        f"Signature={sign(user.secret_key, date)}"
    )
    auth = Authenticator([user], 900)
    started = time.perf_counter()
    for _ in range(rounds):
        require(auth.authenticate(header, date), Kind.TOPIC, TOPIC, Action.PUB)
    cached = (time.perf_counter() - started) / rounds
    fresh_rounds = rounds // 10
    started = time.perf_counter()
    for _ in range(fresh_rounds):
        Authenticator([user], 900).authenticate(header, date)
    fresh = (time.perf_counter() - started) / fresh_rounds
    return {"cached_us": cached * 1e6, "uncached_us": fresh * 1e6}


def run_auth_bench(work_dir: Path, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Both brokers up at once, cases interleaved (off, on, on, off, …) and the median
    of ``rounds`` runs kept: the machine is shared, so a load that comes and goes
    must hit both sides alike."""
    results: dict[str, Any] = {"check": check_cost(), "cases": {}, "rounds": rounds}
    runtimes = {a: LocalRuntime(work_dir / f"auth-{a}") for a in ("off", "on")}
    endpoints: dict[str, str] = {}
    try:
        for name, runtime in runtimes.items():
            state = runtime.up(auth_cluster(name == "on"), overrides=dict(DISK_GUARDS_OFF))
            endpoints[name] = state["clientEndpoints"]
        found = UsersFile.load(users_path(runtimes["on"].directory)).find(USER)
        assert found is not None
        credentials = {"off": None, "on": (USER, found.secret_key)}
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in range(rounds):
            for shape, (batch, inflight) in SHAPES.items():
                for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    result = asyncio.run(
                        _produce(endpoints[side], seconds, batch, inflight, credentials[side])
                    )
                    runs.setdefault((shape, side), []).append(result)
    finally:
        for runtime in runtimes.values():
            runtime.down()
    for (shape, side), found_runs in runs.items():
        ordered = sorted(found_runs, key=lambda x: x["msgs_per_s"])
        median = dict(ordered[len(ordered) // 2])
        median["all_msgs_per_s"] = [round(x["msgs_per_s"]) for x in found_runs]
        results["cases"].setdefault(shape, {})[side] = median
    for case in results["cases"].values():
        off, on = case["off"]["msgs_per_s"], case["on"]["msgs_per_s"]
        case["ratio_on_to_off"] = on / off if off else 0.0
    return results


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for shape, case in results["cases"].items():
        for auth in ("off", "on"):
            r = case[auth]
            out.append(
                {
                    "shape": shape,
                    "auth": auth,
                    "msgs_per_s": round(r["msgs_per_s"]),
                    "p50_ms": round(r["p50_ms"], 2),
                    "p99_ms": round(r["p99_ms"], 2),
                    "errors": r["errors"],
                    "ratio": round(case["ratio_on_to_off"], 3) if auth == "on" else "",
                }
            )
    return out
