"""Every query the monitoring ships, runnable in plain Prometheus — the contract for
the suite that scrapes a running local cluster and checks that each returns data.

``queries()`` lists each dashboard target (from the packaged JSON, so what ships is
what is checked), each alert's ``expr`` and ``signal``, and each metric name in
:data:`METRICS`. Grafana variables are replaced so a query covers everything:
``$cluster``/``$group``/``$topic``/``$consumer_group`` (always used as ``=~`` matchers)
become ``.*``, ``$__rate_interval``/``$__interval`` become ``1m`` and ``$__range``
``5m``.

:data:`EXPECTED_EMPTY` names the sources that may return nothing on a healthy local
cluster (three replicas per group, producers and consumers running, one slave
stopped) and why; anything else returning nothing is a bug in a query or a metric.
That cluster runs without tiered storage, so every query of ``rocketmq_tiered_*`` (the
metrics, the *Tiered storage* dashboard, the tiered alerts) is expected empty there;
that a broker with tiered storage exports exactly :data:`TIERED_METRICS` (and one
without, none of them) is checked on a real broker in
``operator/tests/monitoring/test_tiered_metrics.py``.

Scrape convention the checks need (see ``conventions``): job ``rocketcluster-broker``
with target labels ``cluster`` and ``group`` for brokers, job
``rocketcluster-controller`` with ``cluster`` for controllers, ``honor_labels: true``;
keep the stopped slave's target in the configuration (its ``up`` is the 0 that
``RocketMQBrokerDown`` reports). ``RocketMQSyncStateSetBelowMinimum`` fires with one of
three replicas stopped only when ``minInSyncReplicas`` is 3 (in ``async`` replication
mode producers keep working meanwhile: the minimum is enforced on sync writes only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from rocketcluster.operator.monitoring.alerts import alerts
from rocketcluster.operator.monitoring.packaged import dashboards

VARIABLES: Final[dict[str, str]] = {
    "cluster": ".*",
    "group": ".*",
    "topic": ".*",
    "consumer_group": ".*",
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "5m",
}
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")

# Every metric name a query can select, as the exposition names it: counters with
# ``_total``, histograms as their ``_bucket``, ``_count`` and ``_sum`` series.
# prometheus_client's ``*_created`` series are left out but for the one an alert uses.
BROKER_METRICS: Final = (
    "rocketmq_messages_in_total",
    "rocketmq_messages_out_total",
    "rocketmq_throughput_in_total",
    "rocketmq_throughput_out_total",
    "rocketmq_send_to_dlq_messages_total",
    "rocketmq_send_to_dlq_messages_created",
    "rocketmq_rpc_latency_bucket",
    "rocketmq_rpc_latency_count",
    "rocketmq_rpc_latency_sum",
    "rocketmq_consumer_lag_messages",
    "rocketmq_consumer_lag_latency",
    "rocketmq_consumer_inflight_messages",
    "rocketmq_consumer_ready_messages",
    "rocketmq_topic_number",
    "rocketmq_consumer_group_number",
    "rocketmq_timer_pending_messages",
    "rocketmq_pop_journal_writes_total",
    "rocketmq_pop_journal_ops_total",
    "rocketmq_pop_journal_applied_total",
    "rocketmq_pop_journal_rebuilds_total",
    "rocketmq_pop_journal_rebuilding",
    "rocketmq_pop_journal_checkpoints_total",
    "rocketmq_pop_revive_dlq_messages_total",
    "rocketmq_cross_group_received_messages_total",
    "rocketmq_cross_group_passed_on_total",
    "rocketmq_ha_role",
    "rocketmq_ha_master_epoch",
    "rocketmq_ha_confirm_offset",
    "rocketmq_ha_sync_state_set_size",
    "rocketmq_ha_min_in_sync_replicas",
    "rocketmq_ha_slave_ack_lag_bytes",
    "rocketmq_ha_replicated_bytes",
    "rocketmq_storage_size",
    "rocketmq_storage_disk_free_bytes",
    "rocketmq_storage_disk_total_bytes",
    "rocketmq_storage_flush_latency_bucket",
    "rocketmq_storage_flush_latency_count",
    "rocketmq_storage_flush_latency_sum",
    "rocketmq_storage_page_cache_reads_total",
    "rocketmq_storage_oldest_message_age",
    "rocketmq_storage_retention_seconds",
    "rocketmq_storage_retention_deleted_bytes_total",
    "rocketmq_storage_deleted_unconsumed_messages_total",
    "rocketmq_storage_retention_held_for_consumers_segments",
    "rocketmq_storage_disk_full_ratio",
    "rocketmq_client_connections",
    "rocketmq_client_limit_refusals_total",
    "rocketcluster_process_cpu_seconds_total",
    "rocketcluster_process_resident_bytes",
    "rocketcluster_event_loop_block_seconds_bucket",
    "rocketcluster_event_loop_block_seconds_count",
    "rocketcluster_event_loop_block_seconds_sum",
)
# Exported only by brokers with spec.tieredStorage enabled (broker/tiered/metrics.py).
TIERED_METRICS: Final = (
    "rocketmq_tiered_upload_lag_bytes",
    "rocketmq_tiered_upload_lag_seconds",
    "rocketmq_tiered_size_bytes",
    "rocketmq_tiered_segments",
    "rocketmq_tiered_uploaded_bytes_total",
    "rocketmq_tiered_uploaded_messages_total",
    "rocketmq_tiered_cold_reads_total",
    "rocketmq_tiered_cold_read_messages_total",
    "rocketmq_tiered_fallbacks_total",
    "rocketmq_tiered_backend_errors_total",
    "rocketmq_tiered_backend_up",
    "rocketmq_tiered_retention_held_segments",
    "rocketmq_tiered_fetch_latency_bucket",
    "rocketmq_tiered_fetch_latency_count",
    "rocketmq_tiered_fetch_latency_sum",
)
CONTROLLER_METRICS: Final = (
    "rocketmq_controller_raft_term",
    "rocketmq_controller_is_leader",
    "rocketmq_controller_has_leader",
    "rocketmq_controller_commit_index",
    "rocketmq_controller_applied_index",
    "rocketmq_controller_wal_bytes",
    "rocketmq_controller_raft_elections_total",
    "rocketmq_controller_raft_leader_changes_total",
    "rocketmq_controller_elections",
    "rocketmq_controller_unclean_elections",
    "rocketmq_controller_master_epoch",
    "rocketmq_controller_sync_state_set_size",
)
# Exported by the canary (spec.canary, `rocketctl canary`: ctl/canary/probe.py), one
# series per probed broker group.
CANARY_METRICS: Final = (
    "rocketmq_canary_e2e_latency_seconds_bucket",
    "rocketmq_canary_e2e_latency_seconds_count",
    "rocketmq_canary_e2e_latency_seconds_sum",
    "rocketmq_canary_probes_total",
    "rocketmq_canary_success_ratio",
    "rocketmq_canary_last_success_timestamp_seconds",
)
METRICS: Final = BROKER_METRICS + TIERED_METRICS + CONTROLLER_METRICS + CANARY_METRICS


@dataclass(frozen=True)
class Query:
    # "dashboard:<uid>/<panel title>/<refId>", "alert:<Name>", "alert-signal:<Name>"
    # or "metric:<name>"
    source: str
    expr: str


class UnknownVariable(ValueError):
    """A dashboard query uses a variable the inventory cannot replace."""


def plain(expr: str, source: str = "") -> str:
    """``expr`` with its Grafana variables replaced (see the module docstring)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in VARIABLES:
            raise UnknownVariable(
                f"{source or expr}: ${name} is not one of {', '.join(sorted(VARIABLES))}; "
                "add it to inventory.VARIABLES"
            )
        return VARIABLES[name]

    return _VARIABLE.sub(replace, expr)


def dashboard_queries(boards: dict[str, dict[str, Any]] | None = None) -> list[Query]:
    found = []
    for board in (boards or dashboards()).values():
        for panel in board.get("panels") or []:
            for target in panel.get("targets") or []:
                source = f"dashboard:{board['uid']}/{panel['title']}/{target['refId']}"
                found.append(Query(source, plain(target["expr"], source)))
    return found


def queries() -> list[Query]:
    found = dashboard_queries()
    for alert in alerts():
        found.append(Query(f"alert:{alert.name}", alert.expr))
        found.append(Query(f"alert-signal:{alert.name}", alert.signal))
    found += [Query(f"metric:{name}", name) for name in METRICS]
    return found


TIERED_BOARD: Final = "rocketcluster-tiered-storage"
_TIERED = (
    "the monitored cluster runs without spec.tieredStorage, and only brokers with tiered "
    "storage export rocketmq_tiered_*"
)
_NOT_FIRING = "the alert's condition does not hold on a healthy cluster"
_CROSS_GROUP = (
    "a receive is answered by another broker group only when the group it asked has "
    "nothing for the consumer group while another has: the traffic decides"
)


def _tiered_sources() -> dict[str, str]:
    """Every query of the tiered metrics: the metrics themselves, the tiered storage
    dashboard's targets, and the tiered alerts with their signals."""
    found = {f"metric:{name}": _TIERED for name in TIERED_METRICS}
    for query in dashboard_queries():
        if query.source.startswith(f"dashboard:{TIERED_BOARD}/"):
            found[query.source] = _TIERED
    for alert in alerts():
        if "rocketmq_tiered_" in alert.signal:
            found[f"alert:{alert.name}"] = _TIERED
            found[f"alert-signal:{alert.name}"] = _TIERED
    return found


EXPECTED_EMPTY: Final[dict[str, str]] = {
    **_tiered_sources(),
    # The stopped slave fires RocketMQBrokerDown and RocketMQSyncStateSetBelowMinimum, the
    # never-acking consumer group RocketMQMessagesDeadLettered;
    # every other alert stays silent.
    "alert:RocketMQGroupHasNoMaster": _NOT_FIRING,
    "alert:RocketMQReplicaAckLagHigh": _NOT_FIRING,
    "alert:RocketMQConsumerLagGrowing": _NOT_FIRING,
    "alert:RocketMQDiskFillingUp": _NOT_FIRING,
    "alert:RocketMQDiskAlmostFull": _NOT_FIRING,
    "alert:RocketMQMessagesDeletedUnconsumed": _NOT_FIRING,
    "alert:RocketMQFlushLatencyHigh": _NOT_FIRING,
    "alert:RocketMQBrokerEventLoopBlocked": _NOT_FIRING,
    "alert:RocketMQControllerWithoutLeader": _NOT_FIRING,
    "alert:RocketMQControllerLeaderFlapping": _NOT_FIRING,
    "alert:RocketMQControllerDown": _NOT_FIRING,
    # Cross-group receives happen only when a receive finds the group it asked drained
    # while another group holds the consumer group's backlog: traffic decides.
    "metric:rocketmq_cross_group_received_messages_total": _CROSS_GROUP,
    "metric:rocketmq_cross_group_passed_on_total": _CROSS_GROUP,
    "dashboard:rocketcluster-consumer-lag/Receives answered by another group/A": _CROSS_GROUP,
    "dashboard:rocketcluster-consumer-lag/Receives answered by another group/B": _CROSS_GROUP,
    # A series per limit appears at the first refusal; well-behaved clients meet none.
    "metric:rocketmq_client_limit_refusals_total": "no client exceeds a clientLimits limit",
    "dashboard:rocketcluster-clients/Refusals by client limit/A": (
        "no client exceeds a clientLimits limit"
    ),
}
