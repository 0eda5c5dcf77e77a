"""What a person reads at the end of a run: the verdicts first, then faults by kind
and their recovery times; and a banner nobody can miss when network faults could not
run."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def skipped_banner(reason: str) -> str:
    bar = "#" * 78
    return (
        f"\n{bar}\n## NETWORK FAULTS SKIPPED: {reason}\n"
        "## Only kill and pause faults ran, on loopback. Partitions, one-way partitions\n"
        "## and packet loss were NOT tested by this run.\n"
        f"{bar}\n"
    )


def _s(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _drains_line(drains: dict[str, Any] | None) -> str:
    if not drains or not drains["checks"]:
        return "  drains after faults: none checked"
    return (
        f"  drains after faults: {drains['checks']} checked, {drains['stalls']} stalled, "
        f"p50 {_s(drains['p50_s'])} max {_s(drains['max_s'])}"
    )


def print_summary(summary: dict[str, Any], out: Path) -> None:
    run = summary["run"]
    fifo = summary["fifo"]
    lines = [
        "",
        f"chaos {run['scenarios']} seed={run['seed']}: "
        f"{'PASS' if summary['valid'] else 'FAIL'} in {run['wall_time_s']:.0f}s "
        f"(network faults: {run['network_faults']})",
        f"  sends: {summary['sends']}",
        f"  deliveries: {summary['deliveries']}",
        f"  lost={summary['lost']['count']} unexpected={summary['unexpected']['count']} "
        f"inconsistent_offsets={summary['inconsistent_offsets']['count']} "
        f"fifo_violations={fifo['violation_count']}+{fifo['consumer_violation_count']} "
        f"(stored+consumer, {fifo['message_groups']} message groups)",
        f"  duplicates={summary['duplicates']['count']} redeliveries={summary['redeliveries']} "
        f"recovered={summary['recovered']['count']}",
        f"  healthy at end: {run['healthy_at_end']}, audit complete: {run['audit_complete']}",
        _drains_line(summary.get("drains")),
        "  faults by kind (p50/p99: first success, every producer healthy, after heal):",
    ]
    for kind, row in summary["recovery_by_kind"].items():
        lines.append(
            f"    {kind:30s} x{row['count']:<3d} recovery {_s(row['recovery_p50_s'])}/"
            f"{_s(row['recovery_p99_s'])}  all {_s(row.get('all_recovered_p50_s'))}/"
            f"{_s(row.get('all_recovered_p99_s'))}  after heal {_s(row['after_heal_p50_s'])}/"
            f"{_s(row['after_heal_p99_s'])}"
            + (f"  NEVER RECOVERED x{row['never_recovered']}" if row["never_recovered"] else "")
            + (
                f"  SOME PRODUCER NEVER RECOVERED x{row['not_all_recovered']}"
                if row.get("not_all_recovered")
                else ""
            )
        )
    for kind, count in summary["faults_skipped"].items():
        lines.append(f"    {kind:30s} x{count:<3d} SKIPPED")
    if summary["lost"]["count"]:
        lines.append(f"  LOST (sample): {summary['lost']['sample']}")
    if summary["unexpected"]["count"]:
        lines.append(f"  UNEXPECTED (sample): {summary['unexpected']['sample']}")
    if summary["inconsistent_offsets"]["count"]:
        lines.append(f"  INCONSISTENT (sample): {summary['inconsistent_offsets']['sample'][:3]}")
    if fifo["violation_count"] or fifo["consumer_violation_count"]:
        lines.append(f"  FIFO: {fifo['violations'][:3]} {fifo['consumer_violations'][:3]}")
    for stall in (summary.get("drains") or {}).get("stalled", []):
        lines.append(f"  DRAIN STALLED after {stall['episode']}: {stall['queues']} queues behind")
        for q in stall["sample"]:
            lines.append(
                f"    {q['bgroup']} {q['cg']} {q['topic']}/{q['queue']}: committed "
                f"{q['committed']} of {q['target']} (in flight {q['inflight']}, "
                f"ready {q['ready']})"
            )
    if run["episodes_not_healthy_within_60s"]:
        lines.append(f"  not whole within 60s after: {run['episodes_not_healthy_within_60s']}")
    for note in run["notes"]:
        lines.append(f"  note: {note}")
    lines.append(f"  report: {out}/summary.json, {out}/timeline.png, {out}/history.jsonl")
    print("\n".join(lines), flush=True)
