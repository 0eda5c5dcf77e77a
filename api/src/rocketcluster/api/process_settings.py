"""What every broker and controller process of a cluster shares, from its manifest —
one function for both renderers (``rocketctl local`` and the operator), so a
process runs with the same settings on a laptop and in a pod."""

from __future__ import annotations

from typing import Any

from rocketcluster.api.cluster import ReplicationMode, RocketCluster


def broker_settings(cluster: RocketCluster) -> dict[str, Any]:
    """The BrokerProcessConfig fields that come from the manifest (not the placement)."""
    brokers = cluster.spec.brokers
    return {
        "cluster": cluster.name,
        "flush": brokers.flush,
        "max_message_bytes": brokers.max_message_bytes,
        "retention_hours": brokers.retention_hours,
        "disk_full": brokers.disk_full,
        "auto_create_topics": brokers.auto_create_topics,
        "stats_interval_seconds": brokers.stats_interval_seconds,
        "replication": brokers.replication,
        "client_limits": brokers.client_limits,
        "front_processes": brokers.front_processes,
        "tiered_storage": cluster.spec.tiered_storage,
        "topics": cluster.spec.topics,
        "consumer_groups": cluster.spec.consumer_groups,
    }


def controller_settings(cluster: RocketCluster) -> dict[str, Any]:
    """The ControllerProcessConfig fields that come from the manifest."""
    return {
        "cluster": cluster.name,
        "unclean_election": cluster.spec.brokers.replication.unclean_election,
        "write_quorum": write_quorum(cluster),
    }


def write_quorum(cluster: RocketCluster) -> int | None:
    """How many in-sync replicas acknowledge a write, when fewer than all of them do
    (the controllers need it to elect only a replica that has every acknowledged write)."""
    replication = cluster.spec.brokers.replication
    if replication.mode is not ReplicationMode.SYNC or replication.all_ack_in_sync_state_set:
        return None
    return replication.in_sync_replicas
