"""rocketctl: the rocketcluster command line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rocketcluster.ctl.bench.results import format_table, write_results

# As bench/cpu/suite.py names them (not imported here: the CLI starts light).
CPU_CASES = ("ceilings", "standalone", "consume", "async3", "sync3", "fronts", "nats")


@click.group()
def main() -> None:
    """rocketcluster command line."""


@main.group()
def bench() -> None:
    """Benchmarks (JSON results, each beside a ceiling measured in the same run)."""


@bench.command("store")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--seconds", type=float, default=3.0, show_default=True, help="per case")
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="where the benchmark writes its data (default: the system temp dir)",
)
def bench_store(out_dir: Path, seconds: float, work_dir: Path | None) -> None:
    """Append and read throughput of the store for 1 KiB records."""
    from rocketcluster.ctl.bench.store_bench import run_store_bench

    result = asyncio.run(run_store_bench(work_dir, seconds))
    path = write_results(out_dir, "store", result)
    click.echo(
        format_table(
            result["append"],
            [
                "path",
                "flush",
                "writers",
                "batch",
                "records_per_s",
                "mb_per_s",
                "raw_mb_per_s",
                "ratio_to_raw",
                "fsyncs",
                "put_p50_ms",
                "put_p99_ms",
            ],
        )
    )
    read = result["read"]
    click.echo(
        f"\nread: consume {read['consume_records_per_s']:,.0f} rec/s, scan "
        f"{read['scan_mb_per_s']:,.0f} MB/s vs raw {read['raw_read_mb_per_s']:,.0f} MB/s "
        f"(ratio {read['ratio_to_raw']:.2f})"
    )
    click.echo(
        f"sync group commit: 64 writers / 1 writer = {result['sync_group_commit_64_vs_1']:.1f}x; "
        f"a lone 1 KiB write+fdatasync: {result['lone_fdatasync_1k_per_s']:,.0f}/s"
    )
    click.echo(f"results: {path}")


@bench.command("tier")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option(
    "--seconds", type=float, default=5.0, show_default=True, help="per in-process produce case"
)
@click.option(
    "--broker-seconds",
    type=float,
    default=10.0,
    show_default=True,
    help="per produce case through a broker",
)
@click.option(
    "--senders",
    type=int,
    default=8,
    show_default=True,
    help="SendMessage calls in flight (32 x 1 KiB each) through a broker",
)
@click.option(
    "--messages",
    type=int,
    default=65_536,
    show_default=True,
    help="1 KiB messages written, uploaded and read back for the cold reads",
)
@click.option("--reps", type=int, default=3, show_default=True, help="runs of each case")
@click.option("--s3/--no-s3", default=True, help="also S3 (moto, from rocketcluster-e2e)")
@click.option(
    "--broker/--no-broker",
    default=True,
    help="also produce through a broker process, tier off vs on",
)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/tier"))
def bench_tier(
    out_dir: Path,
    seconds: float,
    broker_seconds: float,
    senders: int,
    messages: int,
    reps: int,
    s3: bool,
    broker: bool,
    work_dir: Path,
) -> None:
    """Produce throughput with the tier's uploader running vs not (through a broker
    process, and in-process at the store's saturation: the worst case), and cold reads
    from the tier (POSIX, S3) vs local reads."""
    from rocketcluster.ctl.bench import tier

    work_dir.mkdir(parents=True, exist_ok=True)
    load = tier.BrokerLoad(seconds=broker_seconds, senders=senders)
    result = asyncio.run(
        tier.run_tier_bench(
            work_dir, seconds, messages=messages, reps=reps, s3=s3, broker=broker, load=load
        )
    )
    path = write_results(out_dir, "tier", result)
    through = result["broker_produce"]
    if through is not None:
        click.echo(
            f"produce through a broker (LeanClient, {through['senders']} x "
            f"{through['batch']} x 1 KiB in flight, {through['seconds_per_case']:g} s per case, "
            "median of each case; CPU in cores):"
        )
        click.echo(format_table(tier.broker_table(result), tier.BROKER_COLUMNS))
        click.echo()
    click.echo(
        "produce in-process, the store at saturation, the uploader on threads beside it "
        "(the worst case; a broker writes segments in a worker process):"
    )
    click.echo(format_table(tier.produce_table(result), tier.PRODUCE_COLUMNS))
    click.echo()
    click.echo("cold reads:")
    click.echo(format_table(tier.read_table(result), tier.READ_COLUMNS))
    click.echo()
    for line in tier.summary_lines(result):
        click.echo(line)
    click.echo(f"results: {path}")


@bench.command("controller")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--trials", type=int, default=20, show_default=True)
@click.option("--seconds", type=float, default=5.0, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/controller"))
def bench_controller(out_dir: Path, trials: int, seconds: float, work_dir: Path) -> None:
    """Committed commands/s and leader-kill failover time on 3 controller processes."""
    from rocketcluster.ctl.bench.controller_bench import run_controller_bench

    result = run_controller_bench(work_dir, trials, seconds)
    path = write_results(out_dir, "controller", result)
    for inflight, row in result["throughput"].items():
        click.echo(
            f"throughput, {inflight} in flight: {row['commands_per_s']:,.0f} commands/s "
            f"(p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms)"
        )
    click.echo(
        f"failover over {trials} leader kills: p50 {result['failover_p50_s']:.2f} s, "
        f"p99 {result['failover_p99_s']:.2f} s, max {result['failover_max_s']:.2f} s"
    )
    click.echo(f"results: {path}")


@bench.command("console")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--topics", type=click.IntRange(1, 5000), default=200, show_default=True)
@click.option("--groups", type=click.IntRange(1, 5000), default=100, show_default=True)
@click.option("--rounds", type=click.IntRange(3, 1000), default=30, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/console"))
def bench_console(out_dir: Path, topics: int, groups: int, rounds: int, work_dir: Path) -> None:
    """Page load times (p50/p95) of the web console over many topics and groups."""
    from rocketcluster.ctl.bench.console_bench import run_console_bench

    result = run_console_bench(
        work_dir, topics=topics, groups=groups, rounds=rounds, say=lambda s: click.echo(s, err=True)
    )
    path = write_results(out_dir, "console", result)
    for name, row in result["pages"].items():
        click.echo(
            f"{name:<16} p50 {row['p50_ms']:>7.1f} ms   p95 {row['p95_ms']:>7.1f} ms   "
            f"cold {row['cold_ms']:>7.1f} ms"
        )
    click.echo(f"results: {path}")


@bench.command("replication")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--seconds", type=float, default=5.0, show_default=True)
@click.option("--kills", type=int, default=20, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/replication"))
def bench_replication(out_dir: Path, seconds: float, kills: int, work_dir: Path) -> None:
    """Produce throughput of replicated groups and recovery over repeated master kills."""
    from rocketcluster.ctl.bench.replication_bench import run_replication_bench

    result = run_replication_bench(work_dir, seconds, kills)
    path = write_results(out_dir, "replication", result)
    for name, row in result["throughput"].items():
        lag = row.get("replication_lag_bytes", {})
        click.echo(
            f"{name:<24} {row['msgs_per_s']:>10,.0f} msgs/s  p99 {row['p99_ms']:.1f} ms"
            + (f"  lag p50 {lag['p50']:,.0f} B max {lag['max']:,.0f} B" if lag else "")
            + (
                f"  elections {row['elections_under_load']}"
                if "elections_under_load" in row
                else ""
            )
        )
    fo = result.get("failover")
    if fo is None:
        click.echo(f"results: {path}")
        return
    click.echo(
        f"failover over {fo['kills']} master kills: recovery p50 {fo['recovery_p50_s']:.2f} s, "
        f"max {fo['recovery_max_s']:.2f} s; gap in acks p50 {fo['ack_gap_p50_s']:.2f} s, "
        f"max {fo['ack_gap_max_s']:.2f} s; acknowledged {fo['acknowledged']:,}, "
        f"lost {fo['lost']}, at two offsets {fo['delivered_at_two_offsets']}"
    )
    click.echo(f"results: {path}")


@bench.command("drain")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--messages", type=int, default=3000, show_default=True, help="backlog per case")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/drain"))
@click.option(
    "--cases",
    default="balanced,one-group,one-group-no-cross",
    show_default=True,
    help="comma-separated",
)
def bench_drain(out_dir: Path, messages: int, work_dir: Path, cases: str) -> None:
    """Where an official SimpleConsumer's time goes draining a backlog: spread over the
    groups, on one group, and on one group without cross-group receives."""
    from rocketcluster.ctl.bench.drain_bench import rows, run_drain_bench

    try:
        result = run_drain_bench(work_dir, messages, tuple(c for c in cases.split(",") if c))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cases") from exc
    path = write_results(out_dir, "drain", result)
    columns = ["case", "msgs_per_s", "empty", "empty_s", "cross_group", "passed_on"]
    columns += ["receive_ms", "ack_ms"]
    columns += ["broker_rcv_ms", "broker_ack_ms", "client_ms", "client_cpu_us", "brokers_cpu_us"]
    click.echo(format_table(rows(result), columns))
    click.echo(
        "per message: receive_ms/ack_ms the client's wall time in each call; broker_*_ms "
        "the masters' time answering them; client_ms the rest (client library, gRPC, hop)"
    )
    click.echo(f"results: {path}")


@bench.command("pop-rebuild")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option(
    "--records",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="journal writes (seed 3's soak retained about this many)",
)
@click.option("--json", "as_json", is_flag=True, help="the JSON result on stdout")
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="where the benchmark writes its data (default: the system temp dir)",
)
def bench_pop_rebuild(out_dir: Path, records: int, as_json: bool, work_dir: Path | None) -> None:
    """What a replica pays to rebuild its POP state: one piece against slices, from the
    journal's start against the latest checkpoint, and the longest event-loop hold."""
    from rocketcluster.ctl.bench.pop_rebuild_bench import run_pop_rebuild_bench

    result = asyncio.run(run_pop_rebuild_bench(work_dir, records))
    path = write_results(out_dir, "pop-rebuild", result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    columns = ["case", "journal_records", "checkpoints", "records_replayed", "seconds"]
    click.echo(format_table(result["cases"], [*columns, "longest_hold_ms"]))
    click.echo(f"results: {path}")


@bench.command("cpu")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--seconds", type=float, default=10.0, show_default=True, help="load per case")
@click.option("--kills", type=int, default=5, show_default=True, help="failover kills (0: none)")
@click.option("--profile", is_flag=True, help="py-spy flame graphs (sync3 and lean consume)")
@click.option("--quick", is_flag=True, help="2 s per case, no profiles, no failover")
@click.option("--cases", default=",".join(CPU_CASES), show_default=True, help="comma-separated")
@click.option("--json", "as_json", is_flag=True, help="the JSON result on stdout")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/cpu"))
def bench_cpu(
    out_dir: Path,
    seconds: float,
    kills: int,
    profile: bool,
    quick: bool,
    cases: str,
    as_json: bool,
    work_dir: Path,
) -> None:
    """CPU µs per message of every process role, ceilings, NATS R3, elections, failover."""
    from rocketcluster.ctl.bench.cpu.report import lines
    from rocketcluster.ctl.bench.cpu.suite import Options, run_cpu_bench
    from rocketcluster.ctl.bench.results import stamp_now

    chosen = tuple(c.strip() for c in cases.split(",") if c.strip())
    unknown = [c for c in chosen if c not in CPU_CASES]
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; choose from {', '.join(CPU_CASES)}")
    stamp = stamp_now()
    opts = Options(out_dir, work_dir.resolve(), stamp, seconds, 1.0, chosen, profile, kills)
    if quick:
        opts.seconds, opts.warmup, opts.profile, opts.kills = 2.0, 0.3, False, 0
        opts.idle_seconds = 1.0
    say = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    result = run_cpu_bench(opts, say=say)
    path = write_results(out_dir, "cpu", result, stamp)
    if as_json:
        click.echo(json.dumps({"file": str(path), **json.loads(path.read_text())}, indent=2))
        return
    for line in lines(result):
        click.echo(line)
    click.echo(f"results: {path}")


@bench.command("front-channel")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--seconds", type=float, default=4.0, show_default=True, help="load per row")
@click.option("--json", "as_json", is_flag=True, help="the JSON result on stdout")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/front-channel"))
def bench_front_channel(out_dir: Path, seconds: float, as_json: bool, work_dir: Path) -> None:
    """What handing send batches from a front process to the store process costs over
    a Unix socket and over shared-memory rings (issue #28's channel, measured)."""
    from rocketcluster.ctl.bench.front_channel import run_front_channel_bench

    if seconds <= 0:
        raise click.BadParameter("must be positive", param_hint="--seconds")
    say = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    result = run_front_channel_bench(work_dir.resolve(), seconds, progress=say)
    path = write_results(out_dir, "front-channel", result)
    if as_json:
        click.echo(json.dumps({"file": str(path), **json.loads(path.read_text())}, indent=2))
        return
    click.echo(format_table(result["rows"], list(result["rows"][0])))
    click.echo("us_per_msg: CPU microseconds of each process per message handed over and answered")
    click.echo(f"results: {path}")


@bench.command("switchover")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--switchovers", type=int, default=20, show_default=True)
@click.option(
    "--lean-inflight",
    type=int,
    default=4,
    show_default=True,
    help="lean-client batches in flight beside the official producers (0: none)",
)
@click.option("--pause", type=float, default=1.0, show_default=True, help="seconds between")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/switchover"))
def bench_switchover(
    out_dir: Path, switchovers: int, lean_inflight: int, pause: float, work_dir: Path
) -> None:
    """Hand the master role round a 3-replica group N times under produce load."""
    from rocketcluster.ctl.bench.switchover_bench import run_switchover_bench

    result = run_switchover_bench(work_dir, switchovers, lean_inflight, pause)
    path = write_results(out_dir, "switchover", result)
    click.echo(
        f"switchovers: {result['succeeded']} of {result['switchovers']} succeeded "
        f"({result['success_rate']:.0%}); took p50 {result['duration_p50_s']:.2f} s, "
        f"p99 {result['duration_p99_s']:.2f} s, max {result['duration_max_s']:.2f} s; "
        f"the old master held writes p50 {result['write_pause_p50_ms']:.0f} ms, "
        f"max {result['write_pause_max_ms']:.0f} ms"
    )
    for name in ("official_client", "lean_client"):
        c = result[name]
        click.echo(
            f"{name.replace('_', ' '):<15} acknowledged {c['acknowledged']:,}, "
            f"send errors {c['send_errors']}, slowest send during a switchover "
            f"{c['max_send_ms_during_switchovers']:,.0f} ms (p99 overall {c['send_p99_ms']:.0f} ms)"
        )
    click.echo(
        f"audit: {result['acknowledged']:,} acknowledged, lost {result['lost']}, "
        f"at two offsets {result['delivered_at_two_offsets']}"
    )
    for r in result["rounds"]:
        if not r["ok"]:
            click.echo(f"  refused {r['from']} -> {r['to']}: {r['message']}")
    click.echo(f"results: {path}")


@bench.command("security")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option("--seconds", type=float, default=5.0, show_default=True, help="per case and round")
@click.option("--reps", type=int, default=3, show_default=True, help="interleaved rounds")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench"))
def bench_security(out_dir: Path, seconds: float, reps: int, work_dir: Path) -> None:
    """Produce through plain, TLS, auth and TLS+auth brokers; the auth check alone."""
    from rocketcluster.ctl.bench.security_bench import (
        COLUMNS,
        rows,
        run_security_bench,
        summary_lines,
    )

    result = run_security_bench(work_dir, seconds, reps)
    path = write_results(out_dir, "security", result)
    click.echo(format_table(rows(result), COLUMNS))
    for line in summary_lines(result):
        click.echo(line)
    click.echo(f"results: {path}")


@bench.command("scale")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option(
    "--sizes",
    default="8,1000,10000,100000",
    show_default=True,
    help="queue counts, comma-separated (8 queues a topic; the smallest is the baseline)",
)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/scale"))
@click.option(
    "--min-sends",
    type=click.IntRange(min=1),
    default=800,
    show_default=True,
    help="sends each client makes at least per size, in rounds of one message a queue",
)
def bench_scale(out_dir: Path, sizes: str, work_dir: Path, min_sends: int) -> None:
    """What queues cost a broker: disk, RSS, fds, restart and send latency with few
    queues and with many, one message in each (the goals of issue #27 judged)."""
    from rocketcluster.ctl.bench.scale_bench import run_scale_bench, table_rows

    try:
        counts = tuple(int(s) for s in sizes.split(",") if s.strip())
        result = run_scale_bench(work_dir, counts, progress=click.echo, min_sends=min_sends)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from exc
    path = write_results(out_dir, "scale", result)
    rows = table_rows(result)
    click.echo(format_table(rows, list(rows[0])))
    click.echo(
        "disk_mb: the store on disk; counted_mb: with the commit log counted for its data "
        "(its segments are preallocated); rss_mb, fds, recovery_s: after the restart"
    )
    click.echo(f"results: {path}")


@bench.command("spark")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results"))
@click.option(
    "--sizes",
    default="1000000,10000000,100000000",
    show_default=True,
    help="snapshot rows of each history (48 hours of snapshots; comma-separated)",
)
@click.option(
    "--masters",
    default="local[2],standalone",
    show_default=True,
    help="local[2] and/or standalone (a Spark standalone cluster of 2 one-core workers)",
)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench/spark"))
def bench_spark(out_dir: Path, sizes: str, masters: str, work_dir: Path) -> None:
    """The health jobs over 48-hour synthetic histories, full and incremental, in
    local[2] and on a standalone cluster; Spark's start-up apart."""
    from rocketcluster.ctl.bench.spark_bench import run_spark_bench, table_rows

    try:
        rows = tuple(int(s) for s in sizes.split(",") if s.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from exc
    chosen = tuple(m.strip() for m in masters.split(",") if m.strip())
    unknown = [m for m in chosen if m not in ("local[2]", "standalone")]
    if unknown or not chosen or not rows:
        raise click.BadParameter(
            "give --sizes N[,N…] and --masters from local[2], standalone", param_hint="--masters"
        )
    result = run_spark_bench(work_dir, rows, chosen, progress=lambda m: click.echo(f"… {m}"))
    path = write_results(out_dir, "spark", result)
    table = table_rows(result)
    click.echo(format_table(table, list(table[0])))
    for goal, verdict in result["goals"].items():
        met = verdict.get("met") if isinstance(verdict, dict) and "met" in verdict else None
        if met is None:  # per master
            met = all(v["met"] for v in verdict.values())
        click.echo(f"{goal}: {'met' if met else 'NOT met'} — {json.dumps(verdict)}")
    click.echo(f"results: {path}")


def _client_bench(
    name: str,
    cases: tuple[str, ...],
    out_dir: Path,
    seconds: float,
    work_dir: Path,
    flushes: tuple[str, ...],
) -> None:
    from rocketcluster.ctl.bench.client_bench import rows, run_client_bench

    result = run_client_bench(work_dir, seconds, flushes, cases)
    path = write_results(out_dir, name, result)
    columns = ["server", "case", "msgs_per_s", "p50_ms", "p99_ms", "messages", "errors", "ratio"]
    columns += ["server_cpu", "client_cpu"]  # CPU s/s: which side limits the case
    click.echo(format_table(rows(result), columns))
    click.echo(f"results: {path}")


def _client_bench_command(name: str, cases: tuple[str, ...], doc: str) -> click.Command:
    @click.command(name, help=doc)
    @click.option(
        "--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench/results")
    )
    @click.option("--seconds", type=float, default=5.0, show_default=True, help="per case")
    @click.option("--work-dir", type=click.Path(path_type=Path), default=Path(".bench"))
    @click.option("--flush", "flushes", multiple=True, default=("async", "sync"), show_default=True)
    def command(out_dir: Path, seconds: float, work_dir: Path, flushes: tuple[str, ...]) -> None:
        _client_bench(name, cases, out_dir, seconds, work_dir, flushes)

    return command


def _register_client_benches() -> None:
    from rocketcluster.ctl.bench.client_cases import CONSUME, PRODUCE

    for name, cases, doc in (
        (
            "produce",
            PRODUCE,
            "Produce 1 KiB messages: official and lean client, beside a no-work server "
            "and the raw grpc.aio transport limit (unary batches).",
        ),
        (
            "consume",
            CONSUME,
            "Consume 1 KiB messages: official and lean client, beside a no-work server "
            "and the raw grpc.aio transport limit (streamed batches).",
        ),
        (
            "clients",
            PRODUCE + CONSUME,
            "Produce and consume with both clients, beside a no-work server and the raw "
            "grpc.aio transport limit.",
        ),
    ):
        bench.add_command(_client_bench_command(name, cases, doc))


_register_client_benches()


@main.group()
def demo() -> None:
    """Demonstrations on the local machine: each tells what happens as it happens
    (--json: only the report, as JSON); the exit code is 1 when something was lost."""


_JSON = click.option(
    "--json", "as_json", is_flag=True, help="print only the report, as JSON (no story)"
)


def _say(as_json: bool) -> Callable[[str], None]:
    return _quiet if as_json else click.echo


def _quiet(_: str) -> None:
    """Nothing: with --json stdout carries the report alone."""


def _finish(report: dict[str, Any], ok: str, as_json: bool) -> None:
    from rocketcluster.ctl.demo_text import verdict_line

    problems = list(report.get("problems", []))
    click.echo(json.dumps(report, indent=2) if as_json else verdict_line(problems, ok))
    if problems:
        raise SystemExit(1)


def _failed(exc: Exception, logs: Path | None) -> click.ClickException:
    """A demo that could not finish: what went wrong and where to look, not a traceback
    (a bug in the demo itself still shows one)."""
    where = ""
    if logs is not None and not isinstance(exc, ValueError) and logs.is_dir():
        where = f" The processes' logs are in {logs}."
    return click.ClickException(f"the demo could not finish: {str(exc).rstrip('.')}.{where}")


# LocalRuntimeError, TimeoutError (waiting for a master), ManifestError, DemoError...
_EXPECTED = (RuntimeError, TimeoutError, ValueError, OSError)


@demo.command("store")
@click.option(
    "--dir",
    "root",
    type=click.Path(path_type=Path),
    default=Path(".demo/store"),
    show_default=True,
    help="the store's directory (emptied first)",
)
@_JSON
def demo_store(root: Path, as_json: bool) -> None:
    """Write with sync flush from a process, kill -9 it, recover, and audit."""
    from rocketcluster.ctl.demo_store import run_store_demo

    try:
        report = run_store_demo(root, say=_say(as_json))
    except _EXPECTED as exc:
        raise _failed(exc, None) from exc
    _finish(report, "no acknowledged record lost", as_json)


def _manifest(default: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "-f",
        "--file",
        "manifest",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        default=Path(default),
        show_default=True,
        help="a RocketCluster manifest (relative to where you run rocketctl)",
    )


@demo.command("standalone")
@_manifest("examples/standalone.yaml")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=Path(".demo/standalone"),
    show_default=True,
    help="the processes' config, logs and data (data removed after a run that passed)",
)
@click.option("--count", type=click.IntRange(min=1), default=200, show_default=True)
@_JSON
def demo_standalone(manifest: Path, directory: Path, count: int, as_json: bool) -> None:
    """Start a standalone broker, produce and consume with the official client, stop."""
    from rocketcluster.ctl.demo_standalone import run_standalone_demo

    try:
        report = run_standalone_demo(manifest, directory, count, say=_say(as_json))
    except _EXPECTED as exc:
        raise _failed(exc, directory / "logs") from exc
    _finish(report, "every produced message was consumed", as_json)


@demo.command("cluster")
@_manifest("examples/cluster.yaml")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=Path(".demo/cluster"),
    show_default=True,
    help="the processes' config, logs and data (emptied first; data removed after a pass)",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.5),
    default=3.0,
    show_default=True,
    help="of producing before the kill, and again after it",
)
@_JSON
def demo_cluster(manifest: Path, directory: Path, seconds: float, as_json: bool) -> None:
    """Start a replicated cluster, kill a master under load, audit, stop.

    With -f examples/secure.yaml (make demo SECURE=1) over TLS, signed with an
    application user's keys."""
    from rocketcluster.ctl.demo_cluster import run_cluster_demo

    try:
        report = run_cluster_demo(manifest, directory, seconds, say=_say(as_json))
    except _EXPECTED as exc:
        raise _failed(exc, directory / "logs") from exc
    _finish(report, "nothing lost: every acknowledged message was read back", as_json)
    if not as_json:
        from rocketcluster.ctl.demo_text import console_lines

        click.echo("\n".join(console_lines(str(manifest))))


def _register() -> None:
    from rocketcluster.ctl.admin_cli import COMMANDS
    from rocketcluster.ctl.canary.cli import COMMANDS as CANARY_COMMANDS
    from rocketcluster.ctl.console_cli import COMMANDS as CONSOLE_COMMANDS
    from rocketcluster.ctl.controller_cli import COMMANDS as CONTROLLER_COMMANDS
    from rocketcluster.ctl.local_cli import local
    from rocketcluster.ctl.render_cli import render
    from rocketcluster.ctl.report_cli import COMMANDS as REPORT_COMMANDS
    from rocketcluster.ctl.tier_cli import COMMANDS as TIER_COMMANDS
    from rocketcluster.ctl.user_cli import COMMANDS as USER_COMMANDS

    main.add_command(local)
    main.add_command(render)
    for command in [
        *COMMANDS,
        *CANARY_COMMANDS,
        *CONSOLE_COMMANDS,
        *CONTROLLER_COMMANDS,
        *REPORT_COMMANDS,
        *TIER_COMMANDS,
        *USER_COMMANDS,
    ]:
        main.add_command(command)


_register()
