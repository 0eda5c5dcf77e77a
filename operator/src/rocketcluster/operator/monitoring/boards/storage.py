"""Where messages live: each broker's store and the tiered store."""

from __future__ import annotations

from typing import Any

from rocketcluster.operator.monitoring import alerts as rules
from rocketcluster.operator.monitoring.boards.common import (
    BROKER_VARS,
    cluster_variable,
    free_ratio,
    group_variable,
    quantile,
    rate,
)
from rocketcluster.operator.monitoring.panels import Grid, Q, board, graph, single, v


def store() -> dict[str, Any]:
    b = BROKER_VARS
    free = v("rocketmq_storage_disk_free_bytes", *b)
    reads = "rocketmq_storage_page_cache_reads_total"
    hit = 'result="hit"'
    grid = (
        Grid()
        .add(
            graph(
                "Disk free",
                "Free share of each broker's data volume (the disk alert also needs a "
                "forecast of running out within a day), and the free share below which "
                "the broker refuses new messages (RocketMQDiskAlmostFull fires "
                f"{rules.DISK_FULL_MARGIN:.0%} above it).",
                "percentunit",
                Q(free_ratio(*b), "{{node_id}}"),
                Q(
                    f"1 - max by (node_id) ({v('rocketmq_storage_disk_full_ratio', *b)})",
                    "{{node_id}} writes refused below",
                ),
                base="red",
                steps=((0.1, "orange"), (rules.DISK_FREE_RATIO, "green")),
                min_value=0,
                max_value=1,
            ),
            12,
        )
        .add(
            graph(
                "Disk free and forecast",
                f"Free bytes now and in 24 hours at the rate of the last "
                f"{rules.DISK_PREDICT_WINDOW}.",
                "bytes",
                Q(f"min by (node_id) ({free})", "{{node_id}} free"),
                Q(
                    f"min by (node_id) (predict_linear({free}[{rules.DISK_PREDICT_WINDOW}], "
                    f"{rules.DISK_PREDICT_SECONDS}))",
                    "{{node_id}} in 24 h",
                ),
                base="red",
                steps=((0.0, "green"),),
            ),
            12,
        )
        .add(
            graph(
                "Flush latency",
                "Commit log flushes: median and 99th percentile (the alert fires above "
                f"{rules.FLUSH_P99_SECONDS} s at p99).",
                "s",
                Q(
                    quantile(0.5, "rocketmq_storage_flush_latency", "node_id", *b),
                    "{{node_id}} p50",
                ),
                Q(
                    quantile(0.99, "rocketmq_storage_flush_latency", "node_id", *b),
                    "{{node_id}} p99",
                ),
                steps=((rules.FLUSH_P99_SECONDS, "red"),),
            ),
            12,
        )
        .add(
            graph(
                "Flushes",
                "Commit log flushes per second.",
                "ops",
                Q(rate("rocketmq_storage_flush_latency_count", "node_id", *b), "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "Page cache hit ratio",
                "Share of message reads served from memory rather than disk.",
                "percentunit",
                Q(
                    f"{rate(reads, 'node_id', *b, extra=hit)} / {rate(reads, 'node_id', *b)}",
                    "{{node_id}}",
                ),
                base="red",
                steps=((0.8, "orange"), (0.95, "green")),
                min_value=0,
                max_value=1,
            ),
            12,
        )
        .add(
            graph(
                "Commit log size",
                "Bytes of commit log on each broker's disk.",
                "bytes",
                Q(f"max by (node_id) ({v('rocketmq_storage_size', *b)})", "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "Oldest message and retention",
                "Age of the oldest stored message against the retention time: once older, "
                "data is deleted.",
                "s",
                Q(
                    f"max by (node_id) ({v('rocketmq_storage_oldest_message_age', *b)})",
                    "{{node_id}} oldest",
                ),
                Q(
                    f"max by (group) ({v('rocketmq_storage_retention_seconds', *b)})",
                    "{{group}} retention",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Deleted by retention",
                "Commit log bytes deleted per second because they outlived retention.",
                "Bps",
                Q(
                    rate("rocketmq_storage_retention_deleted_bytes_total", "node_id", *b),
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Deleted unconsumed",
                "Messages per second retention deleted that no consumer group had consumed "
                "(expired unread, or pushed out of a full disk with diskFull: deleteOldest).",
                "short",
                Q(
                    rate("rocketmq_storage_deleted_unconsumed_messages_total", "node_id", *b),
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Kept for consumers on a full disk",
                "Commit log segments the disk's fill level would delete but retention keeps "
                "because consumer groups have not consumed them (diskFull: reject).",
                "short",
                Q(
                    "max by (node_id) "
                    f"({v('rocketmq_storage_retention_held_for_consumers_segments', *b)})",
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
    )
    return board(
        "rocketcluster-store",
        "RocketCluster / Store",
        "Disk, flush latency, page cache and retention of each broker's store.",
        [cluster_variable(), group_variable()],
        grid,
    )


def tiered_storage() -> dict[str, Any]:
    """Rows: is the backend up and does retention hold data back; upload lag; upload
    throughput; what the tier holds; cold reads and their latency; what fails."""
    b = BROKER_VARS
    fetch = "rocketmq_tiered_fetch_latency"
    grid = (
        Grid()
        .add(
            single(
                "Backend",
                "Whether each broker's calls to the tier's backend succeed (the alert fires "
                f"after {rules.BACKEND_DOWN_FOR} down).",
                "none",
                Q(
                    f"min by (node_id) ({v('rocketmq_tiered_backend_up', *b)})",
                    "{{node_id}}",
                ),
                mappings={"0": ("down", "red"), "1": ("up", "green")},
            ),
            12,
            5,
        )
        .add(
            single(
                "Retention held",
                "Commit log segments local retention would delete but keeps because their "
                "messages are not in the tier yet: the disk fills while this is above 0.",
                "none",
                Q(
                    f"max by (node_id) ({v('rocketmq_tiered_retention_held_segments', *b)})",
                    "{{node_id}}",
                ),
                steps=((1.0, "red"),),
            ),
            12,
            5,
        )
        .add(
            graph(
                "Upload lag (bytes)",
                "Commit log bytes not yet uploaded to tiered storage.",
                "bytes",
                Q(
                    f"max by (node_id) ({v('rocketmq_tiered_upload_lag_bytes', *b)})",
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Upload lag (time)",
                "Age of the oldest data not yet uploaded (the alert fires above "
                f"{rules.UPLOAD_LAG_SECONDS} s).",
                "s",
                Q(
                    f"max by (node_id) ({v('rocketmq_tiered_upload_lag_seconds', *b)})",
                    "{{node_id}}",
                ),
                steps=((float(rules.UPLOAD_LAG_SECONDS), "red"),),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Upload throughput",
                "Bytes uploaded to the tier per second (by each group's master).",
                "Bps",
                Q(rate("rocketmq_tiered_uploaded_bytes_total", "node_id", *b), "{{node_id}}"),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Uploaded messages",
                "Messages uploaded to the tier per second.",
                "cps",
                Q(
                    rate("rocketmq_tiered_uploaded_messages_total", "node_id", *b),
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Tier size",
                "Bytes of each broker group's segments in the tier.",
                "bytes",
                Q(f"max by (group) ({v('rocketmq_tiered_size_bytes', *b)})", "{{group}}"),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Tier segments",
                "Segments of each broker group in the tier.",
                "short",
                Q(f"max by (group) ({v('rocketmq_tiered_segments', *b)})", "{{group}}"),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Cold reads",
                "Messages served from the tier per second, and the reads (receives, "
                "lookups) that asked for them.",
                "cps",
                Q(
                    rate("rocketmq_tiered_cold_read_messages_total", "node_id", *b),
                    "{{node_id}} messages",
                ),
                Q(rate("rocketmq_tiered_cold_reads_total", "node_id", *b), "{{node_id}} reads"),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Fetch latency",
                "Seconds to fetch one segment from the tier's backend: median and 99th percentile.",
                "s",
                Q(quantile(0.5, fetch, "node_id", *b), "{{node_id}} p50"),
                Q(quantile(0.99, fetch, "node_id", *b), "{{node_id}} p99"),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Fallbacks and backend errors",
                "Per second: tier reads served from the local disk instead (or that waited), "
                "and failed calls to the backend by operation (upload, read).",
                "ops",
                Q(rate("rocketmq_tiered_fallbacks_total", "node_id", *b), "{{node_id}} fallbacks"),
                Q(
                    rate("rocketmq_tiered_backend_errors_total", "node_id, operation", *b),
                    "{{node_id}} {{operation}} errors",
                ),
                min_value=0,
            ),
            24,
        )
    )
    return board(
        "rocketcluster-tiered-storage",
        "RocketCluster / Tiered storage",
        "Backend health, upload lag and throughput, size, cold reads and their latency of "
        "the tiered store (spec.tieredStorage).",
        [cluster_variable(), group_variable()],
        grid,
    )
