"""What a person reads at the end of a run: the verdicts first, then faults by kind
and their recovery times; and a banner nobody can miss when network faults could not
run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocketcluster.ctl.chaos.broker_logs import summary_lines


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


def summary_text(summary: dict[str, Any], out: Path) -> str:
    run = summary["run"]
    fifo = summary["fifo"]
    lines = [
        "",
        f"chaos {run['scenarios']} seed={run['seed']}: "
        f"{'PASS' if summary['valid'] else 'FAIL'} in {run['wall_time_s']:.0f}s "
        f"(network faults: {run['network_faults']})",
        f"  faults: {run['faults_injected']} in {run['episodes']} episodes"
        + (f", {run['sessions']} sessions" if run.get("sessions", 1) > 1 else "")
        + (
            f"; {run['seconds_per_fault']:.1f} s a fault, recovery included"
            if run.get("seconds_per_fault")
            else ""
        ),
        f"  sends: {summary['sends']}",
        f"  deliveries: {summary['deliveries']}",
        f"  lost={summary['lost']['count']} unexpected={summary['unexpected']['count']} "
        f"inconsistent_offsets={summary['inconsistent_offsets']['count']} "
        f"fifo_violations={fifo['violation_count']}+{fifo['consumer_violation_count']} "
        f"(stored+consumer, {fifo['message_groups']} message groups) "
        f"delivered_after_ack={summary.get('delivered_after_ack', {}).get('count', 0)}",
        f"  duplicates={summary['duplicates']['count']} redeliveries={summary['redeliveries']} "
        f"recovered={summary['recovered']['count']}",
        f"  healthy at end: {run['healthy_at_end']}, audit complete: {run['audit_complete']}"
        + (
            f" ({run['retired_before_audit']} acknowledged messages every consumer group had "
            "received were deleted by retention before it)"
            if run.get("retired_before_audit")
            else ""
        ),
        _drains_line(summary.get("drains")),
        *(summary_lines(summary["brokers"]) if "brokers" in summary else []),
        "  faults by kind (recovery p50/p99 to a first success; all: p50/p99/max until "
        "every failing producer succeeded again; after heal p50/p99; whole: p50/p99 from "
        "the episode's last heal until the cluster was whole again):",
    ]
    for kind, row in summary["recovery_by_kind"].items():
        lines.append(
            f"    {kind:30s} x{row['count']:<3d} recovery {_s(row['recovery_p50_s'])}/"
            f"{_s(row['recovery_p99_s'])}  all {_s(row.get('all_recovered_p50_s'))}/"
            f"{_s(row.get('all_recovered_p99_s'))}/{_s(row.get('all_recovered_max_s'))}  "
            f"after heal {_s(row['after_heal_p50_s'])}/"
            f"{_s(row['after_heal_p99_s'])}  "
            f"whole {_s(row.get('whole_p50_s'))}/{_s(row.get('whole_p99_s'))}"
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
    after_ack = summary.get("delivered_after_ack", {})
    if after_ack.get("count"):
        lines.append(f"  DELIVERED AFTER ACK (sample): {after_ack['sample'][:3]}")
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
    for crash in run.get("crashed", []):
        lines.append(
            f"  CRASHED: {crash['process']} exited by itself (session {crash['session']}, "
            f"t={crash['time']:.0f}s)"
        )
    if run["episodes_not_healthy_within_60s"]:
        lines.append(
            f"  not whole within the settle time after: {run['episodes_not_healthy_within_60s']}"
        )
    for note in run["notes"]:
        lines.append(f"  note: {note}")
    lines.append(f"  report: {out}/summary.json, {out}/timeline.png, {out}/history.jsonl")
    return "\n".join(lines)
