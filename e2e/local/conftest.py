"""The replicated-cluster helpers live in rocketcluster.ctl.workload (the demo and the
failover benchmark use them too)."""

from rocketcluster.ctl.workload import TOPIC, Cluster, Workload, audit, ha_cluster, running

__all__ = ["TOPIC", "Cluster", "Workload", "audit", "ha_cluster", "running"]
