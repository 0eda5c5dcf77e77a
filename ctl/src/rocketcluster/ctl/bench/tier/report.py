"""The tier benchmark's result as tables (one per part, for ``format_table``) and as
a summary in words: the ratios, and where an uploader fell behind, the warning that
its slowdown understates what keeping up would cost.
"""

from __future__ import annotations

from typing import Any

KEPT_UP = 0.9  # an uploader that uploaded less during the run fell behind
# ... or, in a broker, one whose oldest message waits longer than this many intervals
KEPT_UP_INTERVALS = 3


BROKER_COLUMNS = [
    "case",
    "msgs_per_s",
    "mb_per_s",
    "slowdown",
    "p99_ms",
    "broker_cpu",
    "cpu_us_per_msg",
    "client_cpu",
    "s3_cpu",
    "other_cpu",
    "uploaded_mb",
    "uploaded_share",
    "catch_up_s",
    "cpu_ms_per_mb",
]
PRODUCE_COLUMNS = [
    "case",
    "records_per_s",
    "mb_per_s",
    "slowdown",
    "uploaded_mb",
    "uploaded_segments",
    "uploaded_share",
    "catch_up_s",
    "tiered_records_per_s",
]
READ_COLUMNS = [
    "case",
    "messages_per_s",
    "mb_per_s",
    "ratio_to_local",
    "fetches",
    "cache_hits",
    "cache_misses",
    "page_cache_misses",
]


def broker_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The through-a-broker rows, for ``format_table`` with :data:`BROKER_COLUMNS`
    (CPU in cores; cpu_ms_per_mb: the broker's CPU per MB uploaded in the catch-up)."""
    rows = []
    for row in result["broker_produce"]["cases"]:
        shown = {
            "case": row["case"],
            "msgs_per_s": row["msgs_per_s"],
            "mb_per_s": row["mb_per_s"],
            "p99_ms": row["p99_ms"],
            "broker_cpu": row["broker_cpu"],
            "cpu_us_per_msg": row["broker_cpu_us_per_msg"],
            "client_cpu": row["client_cpu"],
            "s3_cpu": row["s3_server_cpu"] if row["s3_server_cpu"] is not None else "",
            "other_cpu": row["other_cpu"],
        }
        if row["case"] != "off":
            per_mb = row["uploader_cpu_ms_per_mb"]
            shown.update(
                slowdown=f"{row['slowdown']:.1%}",
                uploaded_mb=row["uploaded_bytes_during_run"] / 1e6,
                uploaded_share=f"{row['uploaded_fraction_during_run']:.0%}",
                catch_up_s=row["catch_up_seconds"],
                cpu_ms_per_mb="" if per_mb is None else per_mb,
            )
        rows.append(shown)
    return rows


def produce_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The produce rows, for ``format_table`` with :data:`PRODUCE_COLUMNS`."""
    rows = []
    for row in result["produce"]:
        shown = {k: row[k] for k in ("case", "records_per_s", "mb_per_s")}
        if row["case"] != "none":
            shown.update(
                slowdown=f"{row['slowdown']:.1%}",
                uploaded_mb=row["uploaded_bytes_during_run"] / 1e6,
                uploaded_segments=row["uploaded_segments_during_run"],
                uploaded_share=f"{row['uploaded_fraction_during_run']:.0%}",
                catch_up_s=row["catch_up_seconds"],
                tiered_records_per_s=row["tiered_records_per_s"],
            )
        rows.append(shown)
    return rows


def read_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The cold-read rows, for ``format_table`` with :data:`READ_COLUMNS`."""
    return [{k: row.get(k, "") for k in READ_COLUMNS} for row in result["read"]["cases"]]


def _slowdowns(label: str, part: dict[str, Any], goal: str) -> str:
    slow = part["uploader_slowdown"]
    return f"{label} " + ", ".join(f"{k} {v:.1%}" for k, v in slow.items()) + f" {goal}"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The ratios, in words."""
    goal = f"(goal < {result['goal_slowdown']:.0%})"
    lines = []
    broker = result.get("broker_produce")
    if broker is not None:
        lines.append(_slowdowns("through a broker: uploader slowdown", broker, goal))
        lines += [
            _broker_case_line(row, result["upload_interval_s"])
            for row in broker["cases"]
            if row["case"] != "off"
        ]
    label = "in-process store at saturation, uploader on threads (the worst case): slowdown"
    lines.append(_slowdowns(label, result, goal))
    lines += [_produce_case_line(row) for row in result["produce"] if row["case"] != "none"]
    reads = {r["case"]: r for r in result["read"]["cases"]}
    lines.append(
        "cold reads / local reads (page cache dropped): "
        + ", ".join(
            f"{case} {reads[case]['ratio_to_local']:.2f}x" for case in reads if case != "local"
        )
    )
    return lines


def _broker_case_line(row: dict[str, Any], upload_interval_s: float) -> str:
    """A tiered case through a broker: what its uploader uploaded during the run and
    after, what that cost the broker (and the S3 server), and whether it fell behind."""
    per_mb = row["uploader_cpu_ms_per_mb"]
    return (
        f"  {row['case']}: uploaded {row['uploaded_bytes_during_run'] / 1e6:.0f} MB "
        f"({row['uploaded_fraction_during_run']:.0%} of the messages) during the "
        f"run, the rest in {row['catch_up_seconds']:.1f} s after it; broker CPU "
        + (f"{per_mb:.0f} ms per MB uploaded (catch-up), " if per_mb is not None else "")
        + f"{row['extra_cpu_ms_per_uploaded_mb']:.0f} ms per MB uploaded during the "
        "run (beyond the off case's CPU per message)"
        + (
            f"; the S3 server took {row['s3_server_cpu']:.2f} cores of this machine"
            if row["case"] == "s3" and row["s3_server_cpu"] is not None
            else ""
        )
        + (
            f"; it fell behind (its oldest message waited {row['lag_seconds_at_end']:.1f}"
            " s at the end), so the slowdown understates what keeping up would cost"
            if row["lag_seconds_at_end"] > KEPT_UP_INTERVALS * upload_interval_s
            else ""
        )
    )


def _produce_case_line(row: dict[str, Any]) -> str:
    """A tiered in-process case: the share its uploader uploaded during the run, and
    whether it fell behind."""
    share = row["uploaded_fraction_during_run"]
    return (
        f"  {row['case']}: the uploader uploaded {share:.0%} of the records during the "
        f"run (median), the rest in {row['catch_up_seconds']:.1f} s after it"
        + (
            "; it fell behind, so the slowdown understates what keeping up would cost"
            if share < KEPT_UP
            else ""
        )
    )
