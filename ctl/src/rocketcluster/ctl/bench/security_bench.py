"""What security costs a producer: four standalone brokers (async flush) — plain, TLS on
the client port, auth (AK/SK signature checks), and TLS with auth — all up together and
measured interleaved over ``reps`` rounds (the order rotates every round, medians kept:
the machine is shared, so a load that comes and goes must hit every case alike).

The lean client drives each in two shapes: one message per SendMessage at 64 in flight
(the official client's shape: the per-request cost of TLS framing and of the check shows
most) and batches of 32 at 16 in flight. Besides msgs/s and latency, the broker's CPU
seconds per message (from /proc/<pid>/stat) show the cost even when this process, the
client, is the bottleneck. The check alone is also timed in this process (a verified
header from the cache, and a new one with its HMAC).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.auth import UserCredentials, UsersFile
from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.tls import ClientTls
from rocketcluster.api.users import Action, PermissionSpec
from rocketcluster.broker.security.auth import Authenticator, Kind, require, sign
from rocketcluster.ctl.bench.client_bench import BODY, TOPIC, _drive, _percentiles
from rocketcluster.ctl.bench.tier.broker_case import cpu_seconds
from rocketcluster.ctl.bench.tier.medians import median
from rocketcluster.ctl.local.auth import users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF

USER = "bench"
SHAPES = {"single_64": (1, 64), "batch32_16": (32, 16)}
# case -> (tls, auth); "plain" first: every ratio is to it
CASES = {
    "plain": (False, False),
    "tls": (True, False),
    "auth": (False, True),
    "tls+auth": (True, True),
}
COLUMNS = [
    "shape",
    "case",
    "msgs_per_s",
    "p50_ms",
    "p99_ms",
    "errors",
    "ratio",
    "broker_cpu_us_per_msg",
    "cpu_ratio",
]


def security_cluster(case: str) -> RocketCluster:
    tls, auth = CASES[case]
    spec: dict[str, Any] = {
        "controller": {"replicas": 0},
        "brokers": {"groups": 1, "replicas": 1, "flush": "async"},
        "topics": [{"name": TOPIC, "queues": 8}],
        "security": {"tls": {"enabled": tls}, "auth": {"enabled": auth}},
    }
    if auth:
        spec["users"] = [{"name": USER, "permissions": [{"topic": TOPIC, "actions": ["pub"]}]}]
    name = f"bench-security-{case.replace('+', '-')}"
    return RocketCluster.model_validate({"metadata": {"name": name}, "spec": spec})


class _Broker:
    """One case's broker: where to send, how to connect, and its pid for the CPU."""

    def __init__(self, runtime: LocalRuntime, case: str, state: dict[str, Any]) -> None:
        tls, auth = CASES[case]
        self.endpoint = str(state["clientEndpoints"])
        self.pid = int(state["processes"][0]["pid"])
        self.tls = ClientTls(ca_file=Path(state["tls"]["caFile"])) if tls else None
        self.credentials: tuple[str, str] | None = None
        if auth:
            found = UsersFile.load(users_path(runtime.directory)).find(USER)
            if found is None:
                raise RuntimeError(f"user {USER!r} missing from {runtime.directory}'s users file")
            self.credentials = (USER, found.secret_key)


async def _produce(broker: _Broker, seconds: float, batch: int, inflight: int) -> dict[str, Any]:
    async with LeanClient(broker.endpoint, tls=broker.tls, credentials=broker.credentials) as c:
        reconnects = await _warm_up(c)
        refused = 0

        async def one() -> int:
            nonlocal refused
            entries = await c.send(TOPIC, [OutgoingMessage(BODY) for _ in range(batch)])
            ok = sum(1 for e in entries if e.status.code == pb.Code.OK)
            refused += len(entries) - ok
            return ok

        cpu_before = cpu_seconds(broker.pid)
        started = time.perf_counter()
        messages, errors, latencies = await _drive(one, inflight, started + seconds)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(broker.pid) - cpu_before
    return {
        "messages": messages,
        "msgs_per_s": messages / elapsed,
        "errors": errors + refused,
        "reconnects": reconnects,
        "broker_cpu_s": cpu,
        "broker_cpu_us_per_msg": cpu / messages * 1e6 if messages else 0.0,
        **_percentiles(latencies),
    }


async def _warm_up(client: LeanClient, attempts: int = 5) -> int:
    """Connect (TLS handshake done) and warm the route before the clock starts. On the
    loaded shared machine a handshake now and then fails (UNAVAILABLE, "Handshake read
    failed"); the channel reconnects as the official client would, and how often it had
    to is reported rather than counted as a produce error."""
    for attempt in range(attempts):
        try:
            await client.send(TOPIC, [OutgoingMessage(BODY)])
            return attempt
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


def check_cost(rounds: int = 200_000) -> dict[str, float]:
    """Microseconds per check in this process: cached (the usual case: a client signs
    once a second) and uncached (parse + HMAC-SHA1 + compare_digest)."""
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
    fresh_rounds = max(1, rounds // 10)
    started = time.perf_counter()
    for _ in range(fresh_rounds):
        Authenticator([user], 900).authenticate(header, date)
    fresh = (time.perf_counter() - started) / fresh_rounds
    return {"cached_us": cached * 1e6, "uncached_us": fresh * 1e6}


def run_security_bench(
    work_dir: Path, seconds: float, reps: int = 3, check_rounds: int = 200_000
) -> dict[str, Any]:
    """Every case's broker up at once; per round and shape each case runs once, the
    order rotated by one each round; the medians of the rounds are kept, and each
    ratio to plain is the median of the rounds' paired ratios."""
    results: dict[str, Any] = {
        "check": check_cost(check_rounds),
        "seconds": seconds,
        "reps": reps,
        "cases": {},
    }
    runtimes = {c: LocalRuntime(work_dir / f"security-{c.replace('+', '-')}") for c in CASES}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        brokers: dict[str, _Broker] = {}
        for case, runtime in runtimes.items():
            state = runtime.up(security_cluster(case), overrides=dict(DISK_GUARDS_OFF))
            brokers[case] = _Broker(runtime, case, state)
        order = list(CASES)
        for r in range(reps):
            for shape, (batch, inflight) in SHAPES.items():
                for case in order[r % len(order) :] + order[: r % len(order)]:
                    result = asyncio.run(_produce(brokers[case], seconds, batch, inflight))
                    runs.setdefault((shape, case), []).append(result)
    finally:
        for runtime in runtimes.values():
            runtime.down()
    for shape in SHAPES:
        plain = runs[(shape, "plain")]
        cases = {}
        for case in CASES:
            found = runs[(shape, case)]
            cases[case] = {
                **_medians(found),
                "ratio_to_plain": _paired(found, plain, "msgs_per_s"),
                "cpu_ratio_to_plain": _paired(found, plain, "broker_cpu_us_per_msg"),
            }
        results["cases"][shape] = cases
    return results


def _paired(runs: list[dict[str, Any]], plain: list[dict[str, Any]], key: str) -> float:
    """The median over rounds of this case's figure over plain's in the same round: a
    round's cases run seconds apart, so a load that comes and goes between rounds (the
    machine is shared) cancels out of the ratio, which the ratio of medians keeps."""
    ratios = [r[key] / p[key] for r, p in zip(runs, plain, strict=True) if p[key]]
    return median(ratios) if ratios else 0.0


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of each figure over the rounds (each on its own: the run with the median
    rate need not have the median CPU); errors summed; every round's rate kept."""
    keys = ("msgs_per_s", "p50_ms", "p99_ms", "broker_cpu_us_per_msg")
    return {
        **{k: median([r[k] for r in runs]) for k in keys},
        "messages": sum(r["messages"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "reconnects": sum(r["reconnects"] for r in runs),
        "runs_msgs_per_s": [round(r["msgs_per_s"]) for r in runs],
    }


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for shape, cases in results["cases"].items():
        for case, r in cases.items():
            out.append(
                {
                    "shape": shape,
                    "case": case,
                    "msgs_per_s": round(r["msgs_per_s"]),
                    "p50_ms": round(r["p50_ms"], 2),
                    "p99_ms": round(r["p99_ms"], 2),
                    "errors": r["errors"],
                    "ratio": round(r["ratio_to_plain"], 3),
                    "broker_cpu_us_per_msg": round(r["broker_cpu_us_per_msg"], 1),
                    "cpu_ratio": round(r["cpu_ratio_to_plain"], 3),
                }
            )
    return out


def summary_lines(results: dict[str, Any]) -> list[str]:
    """What each layer costs, as a share of plain throughput and in broker CPU."""
    lines = []
    for shape, cases in results["cases"].items():
        cost = {c: 1 - cases[c]["ratio_to_plain"] for c in ("tls", "auth", "tls+auth")}
        cpu = {c: cases[c]["cpu_ratio_to_plain"] - 1 for c in cost}
        lines.append(
            f"{shape}: TLS costs {cost['tls']:.1%} of produce throughput, the signature "
            f"check {cost['auth']:.1%}, both {cost['tls+auth']:.1%}; broker CPU per message "
            f"{cpu['tls']:+.1%} (TLS), {cpu['auth']:+.1%} (check), {cpu['tls+auth']:+.1%} (both)"
        )
    check = results["check"]
    lines.append(
        f"the check alone: {check['cached_us']:.2f} us cached, "
        f"{check['uncached_us']:.2f} us with parse + HMAC"
    )
    return lines
