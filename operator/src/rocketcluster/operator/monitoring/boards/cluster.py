"""The cluster's health: overview, broker groups and replication, the controllers' Raft group."""

from __future__ import annotations

from typing import Any

from rocketcluster.operator.monitoring import alerts as rules
from rocketcluster.operator.monitoring.boards.common import (
    BROKER_VARS,
    RATE,
    cluster_variable,
    free_ratio,
    group_variable,
    quantile,
    rate,
    targets_down,
)
from rocketcluster.operator.monitoring.conventions import BROKER_JOB, CONTROLLER_JOB
from rocketcluster.operator.monitoring.panels import Grid, Q, board, graph, single, v

ROLES: dict[str, tuple[str, str]] = {
    "0": ("starting", "blue"),
    "1": ("master", "green"),
    "2": ("slave", "purple"),
    "3": ("no master", "red"),
}


def overview() -> dict[str, Any]:
    c = ("cluster",)
    masters = f"sum by (cluster, group) ({v('rocketmq_ha_role', *c)} == bool 1)"
    lag_steps = ((1000.0, "orange"), (10000.0, "red"))
    grid = (
        Grid()
        .add(
            single(
                "Brokers down",
                f"Broker targets Prometheus cannot scrape (job {BROKER_JOB}).",
                "none",
                Q(targets_down(BROKER_JOB)),
                steps=((1.0, "red"),),
            ),
            4,
            4,
        )
        .add(
            single(
                "Controllers down",
                f"Controller targets Prometheus cannot scrape (job {CONTROLLER_JOB}).",
                "none",
                Q(targets_down(CONTROLLER_JOB)),
                steps=((1.0, "red"),),
            ),
            4,
            4,
        )
        .add(
            single(
                "Groups without a master",
                "Replicated broker groups where no broker reports the master role.",
                "none",
                Q(f"sum(1 - clamp_max({masters}, 1))"),
                steps=((1.0, "red"),),
            ),
            4,
            4,
        )
        .add(
            single(
                "Controller leader",
                "Whether any controller member knows a Raft leader.",
                "none",
                Q(f"max({v('rocketmq_controller_has_leader', *c)})"),
                mappings={"0": ("none", "red"), "1": ("elected", "green")},
            ),
            4,
            4,
        )
        .add(
            single(
                "Topics",
                "Topics the brokers know.",
                "none",
                Q(f"max({v('rocketmq_topic_number', *c)})"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Consumer groups",
                "Consumer groups the brokers know.",
                "none",
                Q(f"max({v('rocketmq_consumer_group_number', *c)})"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Messages in",
                "Messages produced per second.",
                "cps",
                Q(f"sum(rate({v('rocketmq_messages_in_total', *c)}[{RATE}]))"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Messages out",
                "Messages delivered to consumers per second.",
                "cps",
                Q(f"sum(rate({v('rocketmq_messages_out_total', *c)}[{RATE}]))"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Bytes in",
                "Message bytes produced per second.",
                "Bps",
                Q(f"sum(rate({v('rocketmq_throughput_in_total', *c)}[{RATE}]))"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Bytes out",
                "Message bytes delivered per second.",
                "Bps",
                Q(f"sum(rate({v('rocketmq_throughput_out_total', *c)}[{RATE}]))"),
            ),
            4,
            4,
        )
        .add(
            single(
                "Consumer lag",
                "Messages not yet acknowledged, all consumer groups.",
                "short",
                Q(f"sum({v('rocketmq_consumer_lag_messages', *c)})"),
                steps=lag_steps,
            ),
            4,
            4,
        )
        .add(
            single(
                "Oldest unacknowledged",
                "Age of the oldest message a consumer group has not acknowledged.",
                "s",
                Q(f"max({v('rocketmq_consumer_lag_latency', *c)})"),
                steps=((60.0, "orange"), (float(rules.CONSUMER_LAG_SECONDS), "red")),
            ),
            4,
            4,
        )
        .add(
            graph(
                "Produced by topic",
                "Messages produced per second, by topic.",
                "cps",
                Q(rate("rocketmq_messages_in_total", "topic", *c), "{{topic}}"),
            ),
            12,
        )
        .add(
            graph(
                "Delivered by consumer group",
                "Messages delivered per second, by consumer group.",
                "cps",
                Q(
                    rate("rocketmq_messages_out_total", "consumer_group", *c),
                    "{{consumer_group}}",
                ),
            ),
            12,
        )
        .add(
            graph(
                "Consumer lag by consumer group",
                "Messages not yet acknowledged, by consumer group.",
                "short",
                Q(
                    f"sum by (consumer_group) ({v('rocketmq_consumer_lag_messages', *c)})",
                    "{{consumer_group}}",
                ),
                steps=lag_steps,
            ),
            12,
        )
        .add(
            graph(
                "CPU by broker",
                "Cores each broker uses: its store process and its front processes "
                "together (frontProcesses), as a pod's CPU limit counts them.",
                "short",
                Q(
                    "sum by (node_id) (rate("
                    f"{v('rocketcluster_process_cpu_seconds_total', *c)}[{RATE}]))",
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "CPU by broker process",
                "Cores of each process of each broker: store, front-0, front-1 …; a "
                "front much hotter than the others holds most clients' connections.",
                "short",
                Q(
                    "sum by (node_id, process) (rate("
                    f"{v('rocketcluster_process_cpu_seconds_total', *c)}[{RATE}]))",
                    "{{node_id}} {{process}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Memory by broker process",
                "Resident memory of each process of each broker (store, front-0 …).",
                "bytes",
                Q(
                    f"sum by (node_id, process) ({v('rocketcluster_process_resident_bytes', *c)})",
                    "{{node_id}} {{process}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Event loop held by broker",
                "Seconds each broker's event loop was held 1 s or more at a time: its "
                "requests, replication and controller heartbeats all waited meanwhile (a "
                "broker held past the heartbeat timeout leaves its SyncStateSet). Its log "
                "names each one ('event loop blocked for', with the part spent on CPU).",
                "s",
                Q(
                    "sum by (node_id) (increase("
                    f"{v('rocketcluster_event_loop_block_seconds_sum', *c)}[{RATE}]))",
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Disk free by broker",
                "Free share of each broker's data volume.",
                "percentunit",
                Q(free_ratio(*c), "{{node_id}}"),
                base="red",
                steps=((0.1, "orange"), (rules.DISK_FREE_RATIO, "green")),
                min_value=0,
                max_value=1,
            ),
            12,
        )
    )
    canary_row(grid)
    return board(
        "rocketcluster-overview",
        "RocketCluster / Overview",
        "A RocketCluster at a glance: availability, traffic, lag and disk.",
        [cluster_variable()],
        grid,
    )


def canary_row(grid: Grid) -> Grid:
    """The canary (spec.canary, ``rocketctl canary``): what a client sees of each broker
    group — whether its messages come back, and how fast."""
    c = ("cluster",)
    ok = rules.CANARY_WINDOW
    return (
        grid.row("Canary")
        .add(
            single(
                "Canary success by group",
                "Share of each group's last 12 canary probes whose message came back "
                "(send through the group's client endpoint, receive, acknowledge).",
                "percentunit",
                Q(f"min by (group) ({v('rocketmq_canary_success_ratio', *c)})", "{{group}}"),
                base="red",
                steps=((0.5, "orange"), (1.0, "green")),
            ),
            6,
        )
        .add(
            graph(
                "Canary end-to-end latency",
                "From before a canary message is sent until it is received back, by group: "
                "the median and the 99th percentile.",
                "s",
                Q(
                    quantile(0.5, "rocketmq_canary_e2e_latency_seconds", "group", *c),
                    "{{group}} p50",
                ),
                Q(
                    quantile(0.99, "rocketmq_canary_e2e_latency_seconds", "group", *c),
                    "{{group}} p99",
                ),
                min_value=0,
            ),
            6,
        )
        .add(
            graph(
                "Canary probes by result",
                "Probes per second by group and result: ok, send_error (refused, no "
                "master, unreachable), receive_timeout (sent but never received). "
                f"RocketClusterCanaryFailing fires when a group has no ok probe in {ok}, "
                f"for {rules.CANARY_FOR}.",
                "ops",
                Q(
                    f"sum by (group, result) (rate({v('rocketmq_canary_probes_total', *c)}"
                    f"[{RATE}]))",
                    "{{group}} {{result}}",
                ),
                min_value=0,
            ),
            6,
        )
        .add(
            graph(
                "Since the last good probe",
                "Seconds since a canary message last came back through each group.",
                "s",
                Q(
                    "time() - max by (group) "
                    f"({v('rocketmq_canary_last_success_timestamp_seconds', *c)})",
                    "{{group}}",
                ),
                steps=((60.0, "orange"), (180.0, "red")),
                min_value=0,
            ),
            6,
        )
    )


def replication() -> dict[str, Any]:
    b = BROKER_VARS
    role = v("rocketmq_ha_role", *b)
    mib = rules.ACK_LAG_BYTES // (1024 * 1024)
    grid = (
        Grid()
        .add(
            single(
                "Role",
                "Each broker's replication role.",
                "none",
                Q(f"max by (node_id) ({role})", "{{node_id}}"),
                mappings=ROLES,
            ),
            16,
            5,
        )
        .add(
            single(
                "Masters per group",
                "Brokers reporting the master role, by group: exactly one is healthy.",
                "none",
                Q(f"sum by (group) ({role} == bool 1)", "{{group}}"),
                base="red",
                steps=((1.0, "green"), (2.0, "red")),
            ),
            8,
            5,
        )
        .add(
            graph(
                "Master epoch",
                "The group's master epoch as the controllers record it and as each broker "
                "knows it: a step is a new master.",
                "none",
                Q(
                    f"max by (group) ({v('rocketmq_controller_master_epoch', *b)})",
                    "{{group}} (controllers)",
                ),
                Q(f"max by (node_id) ({v('rocketmq_ha_master_epoch', *b)})", "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "SyncStateSet size",
                "In-sync replicas as each group's master counts them and as the controllers "
                "record them, against minInSyncReplicas (fewer refuses sync writes).",
                "none",
                Q(
                    f"max by (group) ({v('rocketmq_ha_sync_state_set_size', *b)}"
                    f" and on (cluster, node_id) ({role} == 1))",
                    "{{group}} in sync",
                ),
                Q(
                    f"max by (group) ({v('rocketmq_ha_min_in_sync_replicas', *b)})",
                    "{{group}} minimum",
                ),
                Q(
                    f"max by (group) ({v('rocketmq_controller_sync_state_set_size', *b)})",
                    "{{group}} (controllers)",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Slave ack lag",
                f"Bytes each slave has not acknowledged (the alert fires above {mib} MiB).",
                "bytes",
                Q(
                    f"max by (group, slave_id) ({v('rocketmq_ha_slave_ack_lag_bytes', *b)})",
                    "{{group}} slave {{slave_id}}",
                ),
                steps=((float(rules.ACK_LAG_BYTES), "red"),),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Confirm offset",
                "Commit log offset every in-sync replica holds; consumers read below it.",
                "bytes",
                Q(
                    f"max by (node_id) ({v('rocketmq_ha_confirm_offset', *b)})",
                    "{{node_id}}",
                ),
            ),
            12,
        )
        .add(
            graph(
                "Replication throughput",
                "Bytes each master sends to its slaves, or each slave receives.",
                "Bps",
                Q(rate("rocketmq_ha_replicated_bytes", "node_id", *b), "{{node_id}}"),
            ),
            24,
        )
    )
    return board(
        "rocketcluster-replication",
        "RocketCluster / Broker groups & replication",
        "Roles, master epochs, SyncStateSets and how far each slave trails its master.",
        [cluster_variable(), group_variable()],
        grid,
    )


def controller() -> dict[str, Any]:
    c = ("cluster",)
    grid = (
        Grid()
        .add(
            single(
                "Leader",
                "Which controller member is the Raft leader.",
                "none",
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_is_leader', *c)})",
                    "member {{node_id}}",
                ),
                mappings={"0": ("follower", "blue"), "1": ("leader", "green")},
            ),
            12,
            5,
        )
        .add(
            single(
                "Leader known",
                "Whether each member knows a Raft leader.",
                "none",
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_has_leader', *c)})",
                    "member {{node_id}}",
                ),
                mappings={"0": ("no", "red"), "1": ("yes", "green")},
            ),
            12,
            5,
        )
        .add(
            graph(
                "Raft term",
                "Each member's Raft term: a step is an election.",
                "none",
                Q(f"max by (node_id) ({v('rocketmq_controller_raft_term', *c)})", "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "Commit and applied index",
                "Raft log entries each member knows committed and has applied.",
                "none",
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_commit_index', *c)})",
                    "{{node_id}} commit",
                ),
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_applied_index', *c)})",
                    "{{node_id}} applied",
                ),
            ),
            12,
        )
        .add(
            graph(
                "Raft elections and leader changes",
                "Elections each member started and leader changes it saw (the flapping "
                f"alert fires above {rules.LEADER_CHANGES_IN_15M} in 15 minutes).",
                "short",
                Q(
                    "sum by (node_id) (increase("
                    f"{v('rocketmq_controller_raft_elections_total', *c)}[{RATE}]))",
                    "{{node_id}} elections",
                ),
                Q(
                    "sum by (node_id) (increase("
                    f"{v('rocketmq_controller_raft_leader_changes_total', *c)}[{RATE}]))",
                    "{{node_id}} leader changes",
                ),
                steps=((1.0, "orange"),),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Commits",
                "Raft log entries committed per second.",
                "ops",
                Q(rate("rocketmq_controller_commit_index", "node_id", *c), "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "Broker master elections",
                "Master elections for broker groups each member ran (unclean ones may lose "
                "acknowledged messages).",
                "short",
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_elections', *c)})",
                    "{{node_id}} elections",
                ),
                Q(
                    f"max by (node_id) ({v('rocketmq_controller_unclean_elections', *c)})",
                    "{{node_id}} unclean",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Raft log size",
                "Bytes of Raft log on each member's disk.",
                "bytes",
                Q(f"max by (node_id) ({v('rocketmq_controller_wal_bytes', *c)})", "{{node_id}}"),
            ),
            12,
        )
    )
    return board(
        "rocketcluster-controller",
        "RocketCluster / Controller Raft",
        "The controllers' Raft group: leader, terms, commit progress and elections.",
        [cluster_variable()],
        grid,
    )
