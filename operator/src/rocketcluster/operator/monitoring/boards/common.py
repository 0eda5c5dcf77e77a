"""What every dashboard shares: the variables, and query shapes used again and again."""

from __future__ import annotations

from typing import Any, Final

from rocketcluster.operator.monitoring.conventions import series
from rocketcluster.operator.monitoring.panels import query_variable, v

RATE: Final = "$__rate_interval"
BROKER_VARS: Final = ("cluster", "group")


def cluster_variable() -> Any:
    return query_variable(
        "cluster", "Cluster", "label_values(rocketmq_topic_number, cluster)", all_values=False
    )


def group_variable() -> Any:
    return query_variable(
        "group",
        "Broker group",
        'label_values(rocketmq_topic_number{cluster=~"$cluster"}, group)',
        all_values=True,
    )


def topic_variable() -> Any:
    return query_variable(
        "topic",
        "Topic",
        'label_values(rocketmq_messages_in_total{cluster=~"$cluster"}, topic)',
        all_values=True,
    )


def consumer_group_variable() -> Any:
    return query_variable(
        "consumer_group",
        "Consumer group",
        'label_values(rocketmq_consumer_lag_messages{cluster=~"$cluster"}, consumer_group)',
        all_values=True,
    )


def rate(metric: str, by: str, *variables: str, extra: str = "") -> str:
    return f"sum by ({by}) (rate({v(metric, *variables, extra=extra)}[{RATE}]))"


def quantile(q: float, metric: str, by: str, *variables: str, extra: str = "") -> str:
    return (
        f"histogram_quantile({q}, sum by ({by}, le) "
        f"(rate({v(metric + '_bucket', *variables, extra=extra)}[{RATE}])))"
    )


def targets_down(job: str) -> str:
    up = series("up", f'job="{job}"', 'cluster=~"$cluster"')
    return f"sum({up} == bool 0)"


def free_ratio(*variables: str) -> str:
    free = v("rocketmq_storage_disk_free_bytes", *variables)
    total = v("rocketmq_storage_disk_total_bytes", *variables)
    return f"min by (group, node_id) ({free} / {total})"
