"""Alert rules as data: one :class:`Alert` per condition that should page or warn
someone, each with the quantity it watches (``signal``, which a healthy cluster
returns data for), the rule (``expr``, the signal with its threshold) and the runbook
section that says what to do.

``alerts(scope)`` writes every rule for a label scope: empty for the chart (every
cluster a Prometheus scrapes), ``{"cluster": "prod"}`` for the PrometheusRule the
operator renders for one RocketCluster. Broker series are assumed to carry a
``group`` label (the broker group); ``up`` carries the target labels of the scrape
convention in :mod:`rocketcluster.operator.monitoring.conventions`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from rocketcluster.operator.monitoring.conventions import (
    BROKER_JOB,
    CONTROLLER_JOB,
    RUNBOOK_URL,
    runbook_anchor,
    series,
)

Severity = Literal["critical", "warning"]
GROUP_NAME: Final = "rocketcluster"

# Thresholds (what a page or warning means is in docs/runbooks.md).
ACK_LAG_BYTES: Final = 64 * 1024 * 1024
CONSUMER_LAG_SECONDS: Final = 300
DISK_PREDICT_WINDOW: Final = "6h"
DISK_PREDICT_SECONDS: Final = 24 * 3600
DISK_FREE_RATIO: Final = 0.25
# RocketMQDiskAlmostFull: the volume is within this much of the ratio above which the
# broker refuses writes (rocketmq_storage_disk_full_ratio, 0.95 by default).
DISK_FULL_MARGIN: Final = 0.05
DISK_ALMOST_FULL_FOR: Final = "5m"
FLUSH_P99_SECONDS: Final = 0.5
# RocketMQBrokerEventLoopBlocked: a block longer than the controllers' heartbeat timeout
# (a bucket bound of rocketcluster_event_loop_block_seconds, broker/loop_watchdog.py).
LOOP_BLOCK_SECONDS: Final = "3.0"
LEADER_CHANGES_IN_15M: Final = 3
UPLOAD_LAG_SECONDS: Final = 600
BACKEND_DOWN_FOR: Final = "5m"
RETENTION_HELD_FOR: Final = "10m"
# The canary: a group none of whose probes succeeded in CANARY_WINDOW (while probes
# ran) for CANARY_FOR pages.
CANARY_WINDOW: Final = "1m"
CANARY_FOR: Final = "2m"

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class ScopeError(ValueError):
    """A scope that cannot become a PromQL selector."""


@dataclass(frozen=True)
class Alert:
    name: str
    severity: Severity
    signal: str  # the watched quantity, no threshold: returns data on a healthy cluster
    expr: str  # the signal with its comparison: returns data only while the alert holds
    for_: str  # how long expr must hold before the alert fires ("" = at once)
    summary: str
    description: str

    @property
    def runbook_url(self) -> str:
        return f"{RUNBOOK_URL}#{runbook_anchor(self.name)}"

    def rule(self) -> dict[str, Any]:
        """The alert as a Prometheus rule (rules file and PrometheusRule alike)."""
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": self.runbook_url,
        }
        return rule


def scope_matchers(scope: Mapping[str, str] | None) -> str:
    """``{"cluster": "prod"}`` as ``cluster="prod"`` (values escaped for PromQL)."""
    parts = []
    for label, value in sorted((scope or {}).items()):
        if not _LABEL_NAME.match(label):
            raise ScopeError(f"{label!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if not isinstance(value, str) or not value:
            raise ScopeError(f"label {label} needs a non-empty string value, not {value!r}")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{label}="{escaped}"')
    return ", ".join(parts)


def alerts(scope: Mapping[str, str] | None = None) -> tuple[Alert, ...]:
    """Every alert, its series restricted to ``scope`` (exact label values)."""
    s = scope_matchers(scope)

    def m(metric: str, *matchers: str) -> str:
        return series(metric, s, *matchers)

    masters = f"sum by (cluster, group) ({m('rocketmq_ha_role')} == bool 1)"
    in_sync = (
        f"max by (cluster, group) ({m('rocketmq_ha_sync_state_set_size')}"
        f" and on (cluster, node_id) ({m('rocketmq_ha_role')} == 1))"
    )
    min_in_sync = f"max by (cluster, group) ({m('rocketmq_ha_min_in_sync_replicas')})"
    ack_lag = f"max by (cluster, group, slave_id) ({m('rocketmq_ha_slave_ack_lag_bytes')})"
    lag_by = "cluster, consumer_group, topic"
    lag_time = f"max by ({lag_by}) ({m('rocketmq_consumer_lag_latency')})"
    lag_trend = f"max by ({lag_by}) (deriv({m('rocketmq_consumer_lag_latency')}[10m]))"
    # A broker creates a (consumer group, topic) series at its first dead-lettered
    # message, already at 1: increase() cannot see that step, so a series created (its
    # ``_created`` timestamp) within the window counts with its whole value.
    dead = m("rocketmq_send_to_dlq_messages_total")
    created = m("rocketmq_send_to_dlq_messages_created")
    dlq = f"sum by ({lag_by}) (({dead} and (time() - {created} < 600)) or increase({dead}[10m]))"
    free = m("rocketmq_storage_disk_free_bytes")
    total = m("rocketmq_storage_disk_total_bytes")
    free_forecast = f"predict_linear({free}[{DISK_PREDICT_WINDOW}], {DISK_PREDICT_SECONDS})"
    used_ratio = f"(1 - {free} / {total})"
    full_ratio = m("rocketmq_storage_disk_full_ratio")
    unconsumed = (
        "sum by (cluster, group, node_id) "
        f"(increase({m('rocketmq_storage_deleted_unconsumed_messages_total')}[10m]))"
    )
    flush_p99 = (
        "histogram_quantile(0.99, sum by (cluster, group, node_id, le) "
        f"(rate({m('rocketmq_storage_flush_latency_bucket')}[5m])))"
    )
    loop_block_le = f'le="{LOOP_BLOCK_SECONDS}"'
    long_blocks = (
        "sum by (cluster, group, node_id) "
        f"(increase({m('rocketcluster_event_loop_block_seconds_count')}[10m]) - ignoring (le) "
        f"increase({m('rocketcluster_event_loop_block_seconds_bucket', loop_block_le)}[10m]))"
    )
    has_leader = f"max by (cluster) ({m('rocketmq_controller_has_leader')})"
    leader_changes = (
        f"max by (cluster) (increase({m('rocketmq_controller_raft_leader_changes_total')}[15m]))"
    )
    broker_up = m("up", f'job="{BROKER_JOB}"')
    controller_up = m("up", f'job="{CONTROLLER_JOB}"')
    upload_lag = f"max by (cluster, group, node_id) ({m('rocketmq_tiered_upload_lag_seconds')})"
    backend_up = f"min by (cluster, group, node_id) ({m('rocketmq_tiered_backend_up')})"
    held = f"max by (cluster, group, node_id) ({m('rocketmq_tiered_retention_held_segments')})"
    probes = m("rocketmq_canary_probes_total")
    probes_ok = m("rocketmq_canary_probes_total", 'result="ok"')
    canary_ok = f"sum by (cluster, group) (increase({probes_ok}[{CANARY_WINDOW}]))"
    canary_probed = f"sum by (cluster, group) (increase({probes}[{CANARY_WINDOW}]))"
    mib = ACK_LAG_BYTES // (1024 * 1024)
    return (
        Alert(
            name="RocketMQGroupHasNoMaster",
            severity="critical",
            signal=masters,
            expr=f"{masters} < 1",
            for_="1m",
            summary="Broker group {{ $labels.group }} of {{ $labels.cluster }} has no master",
            description=(
                "No broker of group {{ $labels.group }} reports the master role: producers "
                "to the group's queues fail and its consumers receive nothing."
            ),
        ),
        Alert(
            name="RocketMQSyncStateSetBelowMinimum",
            severity="critical",
            signal=in_sync,
            expr=f"{in_sync} < on (cluster, group) {min_in_sync}",
            for_="1m",
            summary=(
                "Group {{ $labels.group }} of {{ $labels.cluster }} has fewer in-sync "
                "replicas than minInSyncReplicas"
            ),
            description=(
                "The master of {{ $labels.group }} counts {{ $value }} in-sync replica(s), "
                "fewer than minInSyncReplicas: sync-replicated writes are refused."
            ),
        ),
        Alert(
            name="RocketMQReplicaAckLagHigh",
            severity="warning",
            signal=ack_lag,
            expr=f"{ack_lag} > {ACK_LAG_BYTES}",
            for_="5m",
            summary=(
                "Slave {{ $labels.slave_id }} of {{ $labels.group }} trails its master by "
                f"more than {mib} MiB"
            ),
            description=(
                "The master of {{ $labels.group }} holds {{ $value | humanize1024 }}B that "
                "slave {{ $labels.slave_id }} has not acknowledged for 5 minutes."
            ),
        ),
        Alert(
            name="RocketMQConsumerLagGrowing",
            severity="warning",
            signal=lag_time,
            expr=f"{lag_time} > {CONSUMER_LAG_SECONDS} and {lag_trend} > 0",
            for_="10m",
            summary=(
                "Consumer group {{ $labels.consumer_group }} falls behind on {{ $labels.topic }}"
            ),
            description=(
                "The oldest message {{ $labels.consumer_group }} has not acknowledged on "
                "{{ $labels.topic }} is {{ $value | humanizeDuration }} old and getting older."
            ),
        ),
        Alert(
            name="RocketMQMessagesDeadLettered",
            severity="warning",
            signal=dlq,
            expr=f"{dlq} > 0",
            for_="",
            summary=(
                "Messages of {{ $labels.topic }} went to the dead-letter queue of "
                "{{ $labels.consumer_group }}"
            ),
            description=(
                "{{ $value | humanize }} message(s) exhausted their delivery attempts in "
                "{{ $labels.consumer_group }} in the last 10 minutes and were moved to "
                "%DLQ%{{ $labels.consumer_group }}."
            ),
        ),
        Alert(
            name="RocketMQDiskFillingUp",
            severity="warning",
            signal=free_forecast,
            expr=f"{free_forecast} < 0 and {free} / {total} < {DISK_FREE_RATIO}",
            for_="30m",
            summary="The disk of broker {{ $labels.node_id }} fills up within 24 hours",
            description=(
                "At the rate of the last 6 hours the data volume of {{ $labels.node_id }} "
                f"is full within a day, and less than {DISK_FREE_RATIO:.0%} of it is free."
            ),
        ),
        Alert(
            name="RocketMQDiskAlmostFull",
            severity="critical",
            signal=used_ratio,
            expr=f"{used_ratio} > {full_ratio} - {DISK_FULL_MARGIN}",
            for_=DISK_ALMOST_FULL_FOR,
            summary="The disk of broker {{ $labels.node_id }} is almost full",
            description=(
                "The data volume of {{ $labels.node_id }} is {{ $value | humanizePercentage }} "
                f"used, within {DISK_FULL_MARGIN:.0%} of the fill ratio above which the "
                "broker refuses new messages (diskFull: reject) or deletes the oldest ones "
                "whether consumed or not (diskFull: deleteOldest)."
            ),
        ),
        Alert(
            name="RocketMQMessagesDeletedUnconsumed",
            severity="warning",
            signal=unconsumed,
            expr=f"{unconsumed} > 0",
            for_="",
            summary="Broker {{ $labels.node_id }} deleted messages no consumer group had read",
            description=(
                "Retention on {{ $labels.node_id }} removed {{ $value | humanize }} "
                "message(s) in the last 10 minutes that no consumer group had consumed: "
                "they expired unread, or a full disk pushed them out (diskFull: "
                "deleteOldest)."
            ),
        ),
        Alert(
            name="RocketMQFlushLatencyHigh",
            severity="warning",
            signal=flush_p99,
            expr=f"{flush_p99} > {FLUSH_P99_SECONDS}",
            for_="10m",
            summary="Commit log flushes of {{ $labels.node_id }} are slow",
            description=(
                "The 99th percentile of commit log flushes on {{ $labels.node_id }} is "
                "{{ $value | humanizeDuration }}: sync-flushed writes wait that long."
            ),
        ),
        Alert(
            name="RocketMQBrokerEventLoopBlocked",
            severity="warning",
            signal=long_blocks,
            expr=f"{long_blocks} > 0",
            for_="",
            summary="Broker {{ $labels.node_id }} stopped serving for seconds at a time",
            description=(
                "The event loop of {{ $labels.node_id }} was held longer than "
                f"{float(LOOP_BLOCK_SECONDS):g} s {{{{ $value | humanize }}}} time(s) in the last "
                "10 minutes: no request, replication or controller heartbeat was served "
                "meanwhile. Its log says 'event loop blocked for' and how much of it was CPU."
            ),
        ),
        Alert(
            name="RocketMQControllerWithoutLeader",
            severity="critical",
            signal=has_leader,
            expr=f"{has_leader} < 1",
            for_="1m",
            summary="The controllers of {{ $labels.cluster }} have no Raft leader",
            description=(
                "No running controller member knows a Raft leader: no election, SyncStateSet "
                "change or catalogue write can happen until one is elected."
            ),
        ),
        Alert(
            name="RocketMQControllerLeaderFlapping",
            severity="warning",
            signal=leader_changes,
            expr=f"{leader_changes} > {LEADER_CHANGES_IN_15M}",
            for_="",
            summary="The controller leader of {{ $labels.cluster }} keeps changing",
            description=(
                "A controller member saw {{ $value | humanize }} Raft leader changes in 15 minutes."
            ),
        ),
        Alert(
            name="RocketMQBrokerDown",
            severity="critical",
            signal=broker_up,
            expr=f"{broker_up} == 0",
            for_="2m",
            summary="Broker {{ $labels.instance }} of {{ $labels.cluster }} is down",
            description=(
                "Prometheus cannot scrape broker {{ $labels.instance }} (group "
                "{{ $labels.group }}): the process is not running or does not answer."
            ),
        ),
        Alert(
            name="RocketMQControllerDown",
            severity="warning",
            signal=controller_up,
            expr=f"{controller_up} == 0",
            for_="2m",
            summary="Controller {{ $labels.instance }} of {{ $labels.cluster }} is down",
            description=(
                "Prometheus cannot scrape controller member {{ $labels.instance }}: the Raft "
                "group runs with one member fewer."
            ),
        ),
        Alert(
            name="RocketMQTieredUploadLagHigh",
            severity="warning",
            signal=upload_lag,
            expr=f"{upload_lag} > {UPLOAD_LAG_SECONDS}",
            for_="15m",
            summary="Broker {{ $labels.node_id }} uploads to tiered storage too late",
            description=(
                "The oldest commit log data of {{ $labels.node_id }} not yet in tiered "
                "storage was written {{ $value | humanizeDuration }} ago."
            ),
        ),
        Alert(
            name="RocketMQTieredBackendDown",
            severity="warning",
            signal=backend_up,
            expr=f"{backend_up} == 0",
            for_=BACKEND_DOWN_FOR,
            summary="Broker {{ $labels.node_id }} cannot reach its tiered storage backend",
            description=(
                "Calls from {{ $labels.node_id }} to the tiered storage backend have failed "
                "for 5 minutes: uploads wait (local retention keeps their data on disk) and "
                "reads of data only in the tier fail or wait."
            ),
        ),
        Alert(
            name="RocketMQTieredRetentionHeld",
            severity="critical",
            signal=held,
            expr=f"{held} > 0",
            for_=RETENTION_HELD_FOR,
            summary=(
                "The disk of broker {{ $labels.node_id }} keeps data tiered storage does "
                "not have: it will fill"
            ),
            description=(
                "Local retention on {{ $labels.node_id }} keeps {{ $value | humanize }} "
                "commit log segment(s) past their time because their messages are not in "
                "tiered storage yet; the disk fills until uploads catch up, then writes "
                "are refused."
            ),
        ),
        Alert(
            name="RocketClusterCanaryFailing",
            severity="critical",
            signal=canary_ok,
            expr=f"{canary_ok} == 0 and on (cluster, group) {canary_probed} > 0",
            for_=CANARY_FOR,
            summary=(
                "The canary cannot produce and consume through group {{ $labels.group }} "
                "of {{ $labels.cluster }}"
            ),
            description=(
                "No canary probe of {{ $labels.group }} has come back for 3 minutes: a "
                "message sent through the group's client endpoint is refused, times out "
                "or is never received — what an application using that group sees now."
            ),
        ),
    )


def rule_groups(
    scope: Mapping[str, str] | None = None, name: str = GROUP_NAME
) -> list[dict[str, Any]]:
    """The ``groups:`` of a Prometheus rules file (and of a PrometheusRule's spec)."""
    return [{"name": name, "rules": [a.rule() for a in alerts(scope)]}]
