"""Monitoring as data: alert rules, Grafana dashboards and the inventory of every
query, written once in Python.

``alerts`` and ``packaged`` are what the operator uses at run time (pure Python and
the generated dashboard JSON shipped as package data); ``dashboards``, ``panels`` and
``generate`` build that JSON with Grafana's foundation SDK, a development dependency
only — the shipped operator never imports them.

Scrape convention (the chart's PodMonitor and the operator's PodMonitor produce it;
any other Prometheus set-up must too): broker targets carry ``job="rocketcluster-broker"``,
controller targets ``job="rocketcluster-controller"``, both a ``cluster`` target label
(the RocketCluster's name) and broker targets a ``group`` label (the broker group).
The metrics themselves carry ``cluster``, ``node_type`` and ``node_id`` (and brokers
``group``); targets are scraped with ``honor_labels`` so the process's own labels win.
"""

from rocketcluster.operator.monitoring.conventions import BROKER_JOB, CONTROLLER_JOB

__all__ = ["BROKER_JOB", "CONTROLLER_JOB"]
