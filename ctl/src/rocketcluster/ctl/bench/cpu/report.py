"""The goals' ratios and the readable lines of a ``bench cpu`` result."""

from __future__ import annotations

from typing import Any

from rocketcluster.ctl.bench.results import format_table

GOALS = {
    "sync3_over_single_produce": 0.8,
    "lean_consume_over_raw_stream": 0.8,
    "lean_consume_over_raw_fetch": 0.8,
    "official_produce_over_empty_handler": 0.8,
    "sync3_over_nats_r3": 1.0,
}
GOAL_US = {"master": 32.0, "slave": 8.0}
# Issue #28: the store process per official message, a front against the empty
# grpc.aio handler per call, official produce (sync 2-of-3) projected on 8 cores.
FRONT_GOALS = {"store_us": 80.0, "front_over_empty_handler": 1.2, "sync3_8_cores": 10_000.0}


def _rate(block: dict[str, Any] | None) -> float | None:
    if not block or "msgs_per_s" not in block:
        return None
    return float(block["msgs_per_s"])


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def ratios(result: dict[str, Any]) -> dict[str, float | None]:
    """The issue's goals as ratios of msgs/s (None where a side was not run)."""
    cases, ceilings = result["cases"], result.get("ceilings", {})
    sync3 = _rate(cases.get("sync3_lean_produce"))
    consume = _rate(cases.get("lean_consume"))
    return {
        "sync3_over_single_produce": _ratio(sync3, _rate(cases.get("standalone_lean_produce"))),
        "lean_consume_over_raw_stream": _ratio(consume, _rate(ceilings.get("raw_stream"))),
        "lean_consume_over_raw_fetch": _ratio(consume, _rate(ceilings.get("raw_fetch"))),
        "official_produce_over_empty_handler": _ratio(
            _rate(cases.get("standalone_official_produce")),
            _rate(ceilings.get("empty_handler_official_produce")),
        ),
        "sync3_over_nats_r3": _ratio(sync3, _rate(result.get("nats_r3"))),
    }


def _row(name: str, block: dict[str, Any]) -> dict[str, Any]:
    us = block.get("cpu_us_per_msg", {})
    row: dict[str, Any] = {
        "case": name,
        "msgs_per_s": block["msgs_per_s"],
        "p50_ms": block["p50_ms"],
        "p99_ms": block["p99_ms"],
    }
    for role in ("master", "slave-1", "slave-2", "proxy", "server", "client"):
        if role in us:
            row[role] = us[role]
    ctl = [v for r, v in us.items() if r.startswith("controller-")]
    if ctl:
        row["controllers"] = sum(ctl)
    nats = [v for r, v in us.items() if r.startswith("nats-")]
    if nats:
        row["nats_nodes"] = " / ".join(f"{v:.1f}" for v in nats)
    row["total"] = block.get("cpu_us_per_msg_total", 0.0)
    return row


COLUMNS = ["case", "msgs_per_s", "p50_ms", "p99_ms", "master", "slave-1", "slave-2"]
COLUMNS += ["controllers", "proxy", "server", "nats_nodes", "client", "total"]


def lines(result: dict[str, Any]) -> list[str]:
    """A table (CPU µs per message per role) and one line per goal."""
    rows = [_row(f"ceiling {k}", v) for k, v in result.get("ceilings", {}).items()]
    rows += [_row(k, v) for k, v in result["cases"].items()]
    nats = result.get("nats_r3", {})
    if "msgs_per_s" in nats:
        rows.append(_row("nats_r3_publish", nats))
    out = ["CPU µs per message, by process role", format_table(rows, COLUMNS)]
    if "skipped" in nats:
        out.append(f"NATS JetStream R3 skipped: {nats['skipped']}")
    for name, value in result["ratios"].items():
        if value is not None:
            out.append(f"{name:<38} {value:5.2f}  (goal >= {GOALS[name]:.1f})")
    sync3 = result["cases"].get("sync3_lean_produce")
    if sync3:
        us = sync3["cpu_us_per_msg"]
        slaves = [v for r, v in us.items() if r.startswith("slave-")]
        per_slave = " / ".join(f"{v:.1f}" for v in slaves)
        out.append(
            f"sync3 lean: master {us.get('master', 0):.1f} µs/msg "
            f"(goal <= {GOAL_US['master']:.0f}), slaves {per_slave} µs/msg "
            f"(goal <= {GOAL_US['slave']:.0f})"
        )
        net = sync3.get("cpu_us_per_msg_net_of_idle")
        if net:
            ctl = sum(v for r, v in net.items() if r.startswith("controller"))
            rest = ", ".join(f"{r} {v:.1f}" for r, v in net.items() if "controller" not in r)
            out.append(f"  net of idle burn: {rest}; controllers {ctl:.1f}")
    out.append(f"elections during load: {result['elections_during_load']} (must be 0)")
    fo = result.get("failover")
    if fo:
        # What the client saw: with no failed send the "recovery" after a failure is 0,
        # so the longest gap between acknowledgements around each kill is the measure.
        out.append(
            f"failover over {fo['kills']} master kills: gap in acknowledgements "
            f"p50 {fo['ack_gap_p50_s']:.2f} s, max {fo['ack_gap_max_s']:.2f} s "
            f"(goal p50 <= 0.5, max <= 1); client errors {fo['client_errors']}, "
            f"recovery after an error p50 {fo['recovery_p50_s']:.2f} s, "
            f"max {fo['recovery_max_s']:.2f} s; lost {fo['lost']}"
        )
    out += front_lines(result)
    for case, prof in result.get("profiles", {}).items():
        for role, path in prof["files"].items():
            out.append(f"flame graph {case} {role}: {path}")
        for role, why in prof["problems"].items():
            out.append(f"no flame graph {case} {role}: {why}")
    return out


def front_lines(result: dict[str, Any]) -> list[str]:
    """The front-process cases: µs per message of the store process, its fronts and
    the clients for each front count, then the projection and the goals."""
    fronts = result.get("fronts")
    if not fronts:
        return []
    rows = []
    for name, case in fronts["cases"].items():
        for load in ("official_produce", "official_consume"):
            block = case.get(load)
            if not block:
                continue
            us = block["cpu_us_per_msg"]
            front_us = [v for r, v in us.items() if r.startswith("master-front-")]
            slaves = [v for r, v in us.items() if r.startswith("slave-") and "front" not in r]
            rows.append(
                {
                    "case": f"{name} {load.removeprefix('official_')}",
                    "msgs_per_s": block["msgs_per_s"],
                    "p99_ms": block["p99_ms"],
                    "store": us.get("master", 0.0),
                    "fronts": " / ".join(f"{v:.0f}" for v in front_us) or "-",
                    "slaves": " / ".join(f"{v:.0f}" for v in slaves) or "-",
                    "clients": us.get("client", 0.0),
                }
            )
    columns = ["case", "msgs_per_s", "p99_ms", "store", "fronts", "slaves", "clients"]
    out = [
        f"front processes, {fronts['clients']} official client processes "
        "(µs per message; store = the store process)",
        format_table(rows, columns),
    ]
    for shape, fed in fronts.get("store_fed", {}).items():
        slaves = [v for r, v in fed["cpu_us_per_msg"].items() if r.startswith("slave-")]
        out.append(
            f"{shape}: the store process fed by {fed['inflight']} calls in flight: "
            f"{fed['msgs_per_s']:,.0f} msgs/s, {fed['store_us_per_msg']:.0f} µs/msg "
            f"({fed['store_cores']:.2f} cores)"
            + (f", slaves {' / '.join(f'{v:.0f}' for v in slaves)} µs/msg" if slaves else "")
        )
    for name, p in fronts["projection"].items():
        rates = ", ".join(f"{c} cores {r:,.0f}/s" for c, r in p["msgs_per_s_by_cores"].items())
        out.append(
            f"{name}: store {p['store_process_us_per_msg']:.0f} µs/msg at this load "
            f"(single process {p['single_process_us_per_msg']:.0f}), fronts "
            f"{p['fronts_us_per_msg']:.0f} µs/msg; projected {rates}"
        )
        if "msgs_per_s_by_cores_fed" in p:
            fed_rates = ", ".join(
                f"{c} cores {r:,.0f}/s" for c, r in p["msgs_per_s_by_cores_fed"].items()
            )
            out.append(
                f"  with the store process busy ({p['store_process_us_per_msg_fed']:.0f} µs/msg, "
                f"goal <= {FRONT_GOALS['store_us']:.0f}): {fed_rates}"
            )
    empty = result.get("ceilings", {}).get("empty_handler_official_produce", {})
    empty_us = empty.get("cpu_us_per_msg", {}).get("server")
    if empty_us:
        worst = max(
            (p["fronts_us_per_msg"] for n, p in fronts["projection"].items() if "produce" in n),
            default=0.0,
        )
        out.append(
            f"a front per official send: up to {worst:.0f} µs against the empty grpc.aio "
            f"handler's {empty_us:.0f} ({worst / empty_us:.2f}x, goal <= "
            f"{FRONT_GOALS['front_over_empty_handler']:.1f}x)"
        )
    sync3 = fronts["projection"].get("sync3_official_produce", {})
    eight = sync3.get("msgs_per_s_by_cores_fed", sync3.get("msgs_per_s_by_cores", {})).get("8")
    if eight is not None:
        out.append(
            f"official produce, sync 2-of-3, 8-core pod: {eight:,.0f} msgs/s projected "
            f"(goal >= {FRONT_GOALS['sync3_8_cores']:,.0f})"
        )
    return out
