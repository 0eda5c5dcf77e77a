"""The tables the jobs read and write, by name and Spark DDL schema.

Inputs come from a live cluster (the ``rocketcluster`` data source) or from a Parquet
snapshot of one (a directory with one sub-directory per input table); either way they
have exactly these columns. Times are epoch milliseconds (``long``) everywhere: the
arithmetic of lag and intervals stays integer, and the report converts once.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

# -- inputs ------------------------------------------------------------------------

QUEUE_STATS: Final = "queue_stats"
CONSUMER_STATS: Final = "consumer_stats"
SEGMENT_STATS: Final = "segment_stats"
EVENTS: Final = "events"

_SNAPSHOT_KEY = "time long, cluster string, broker_group string, broker_id int"

INPUT_SCHEMAS: Final[dict[str, str]] = {
    QUEUE_STATS: (
        f"{_SNAPSHOT_KEY}, topic string, queue_id int, min_offset long, max_offset long, "
        "head_store_time long, tail_store_time long, last_read_time long"
    ),
    CONSUMER_STATS: (
        f"{_SNAPSHOT_KEY}, consumer_group string, topic string, queue_id int, "
        "committed_offset long, min_offset long, max_offset long, "
        "committed_store_time long, inflight long, retry long"
    ),
    SEGMENT_STATS: (
        f"{_SNAPSHOT_KEY}, topic string, queue_id int, segment long, bytes long, "
        "messages long, min_store_time long, max_store_time long, last_read_time long, "
        "tiered boolean"
    ),
    # The controller's event history: one row per replicated change, with the group's
    # state after it (master, epochs, SyncStateSet).
    EVENTS: (
        "time long, index long, broker_group string, command string, reason string, "
        "broker_id int, master_id int, master_epoch int, sync_state_set array<int>, "
        "sync_state_set_epoch int, unclean boolean"
    ),
}
INPUTS: Final = tuple(INPUT_SCHEMAS)

# -- results -----------------------------------------------------------------------

LAG_POINTS: Final = "lag_points"  # lag per snapshot: the plot's data
LAG_QUEUES: Final = "lag_queues"  # Burrow-style status per group/topic/queue
LAG_GROUPS: Final = "lag_groups"  # and per consumer group
SSS_INTERVALS: Final = "sss_intervals"  # membership intervals per replica
SSS_MASTERS: Final = "sss_masters"  # who was master when (master_id null: none)
SSS_REPLICAS: Final = "sss_replicas"  # time in sync and flaps per replica
SSS_GROUPS: Final = "sss_groups"  # elections, unclean ones, time without master
TIERING_CANDIDATES: Final = "tiering_candidates"  # ranked segments and queues

RESULT_SCHEMAS: Final[dict[str, str]] = {
    LAG_POINTS: (
        "time long, broker_group string, consumer_group string, topic string, "
        "queue_id int, committed_offset long, max_offset long, lag_messages long, "
        "lag_ms long, inflight long, retry long"
    ),
    LAG_QUEUES: (
        "broker_group string, consumer_group string, topic string, queue_id int, "
        "status string, reason string, lag_messages long, lag_ms long, "
        "window_start long, window_end long, points int"
    ),
    LAG_GROUPS: (
        "consumer_group string, status string, reason string, queues int, "
        "lag_messages long, max_lag_ms long, worst_topic string, worst_queue_id int, "
        "worst_broker_group string"
    ),
    SSS_INTERVALS: ("broker_group string, broker_id int, start long, end long, open boolean"),
    SSS_MASTERS: "broker_group string, master_id int, master_epoch int, start long, end long",
    SSS_REPLICAS: (
        "broker_group string, broker_id int, time_in_sync_ms long, in_sync_ratio double, "
        "joins int, leaves int, flaps int"
    ),
    SSS_GROUPS: (
        "broker_group string, window_start long, window_end long, elections int, "
        "master_changes int, unclean_elections int, time_without_master_ms long, "
        "without_master_intervals int, flaps int, sss_changes int"
    ),
    TIERING_CANDIDATES: (
        "rank int, level string, broker_group string, topic string, queue_id int, "
        "segment long, bytes long, messages long, age_ms long, idle_ms long, "
        "score double, monthly_saving double, tiered boolean"
    ),
}
RESULTS: Final = tuple(RESULT_SCHEMAS)


def column_names(ddl: str) -> list[str]:
    """The column names of a DDL schema string, in order (no Spark needed)."""
    names = []
    depth = 0
    field = ""
    for ch in ddl + ",":
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            names.append(field.strip().split(" ", 1)[0])
            field = ""
        else:
            field += ch
    return names


def column_types(ddl: str) -> list[tuple[str, str]]:
    """(name, type) pairs of a DDL schema string, types as written (``array<int>``)."""
    pairs = []
    for name in column_names(ddl):
        start = ddl.index(name + " ") + len(name) + 1
        rest = ddl[start:]
        depth = 0
        end = len(rest)
        for i, ch in enumerate(rest):
            depth += ch == "<"
            depth -= ch == ">"
            if ch == "," and depth == 0:
                end = i
                break
        pairs.append((name, rest[:end].strip()))
    return pairs


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a DDL string, without a Spark session (Spark's own parser
    needs a running JVM; the generator and the tests do not)."""
    return pa.schema([pa.field(name, _arrow_type(kind)) for name, kind in column_types(ddl)])


def _arrow_type(kind: str) -> pa.DataType:
    simple = {
        "long": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "boolean": pa.bool_(),
        "double": pa.float64(),
    }
    if kind in simple:
        return simple[kind]
    if kind.startswith("array<") and kind.endswith(">"):
        return pa.list_(_arrow_type(kind[len("array<") : -1]))
    raise ValueError(f"no Arrow type for DDL type {kind!r}")
