"""The names dashboards, alerts, runbooks and scrape configuration agree on, and the
one helper that writes a PromQL series selector."""

from __future__ import annotations

from typing import Final

# Scrape jobs: the prefix and the pod's component label (broker, controller).
JOB_PREFIX: Final = "rocketcluster-"
BROKER_JOB: Final = f"{JOB_PREFIX}broker"
CONTROLLER_JOB: Final = f"{JOB_PREFIX}controller"
# The canary (spec.canary) is scraped under its own job, on its own port.
CANARY_JOB: Final = f"{JOB_PREFIX}canary"
# Where each alert's runbook section lives (the heading is the alert's name; GitHub
# anchors it lower-cased).
RUNBOOK_URL: Final = "https://github.com/rocketcluster/rocketcluster/blob/main/docs/runbooks.md"
# Dashboards, rules and the ConfigMaps the Grafana sidecar picks up.
DASHBOARD_TAG: Final = "rocketcluster"
GRAFANA_DASHBOARD_LABEL: Final = "grafana_dashboard"


def series(metric: str, *matchers: str) -> str:
    """``metric{m1, m2}`` without the empty matchers (``metric`` alone when none):
    a scope such as ``cluster="prod"`` may be empty."""
    kept = [m for m in matchers if m]
    return f"{metric}{{{', '.join(kept)}}}" if kept else metric


def runbook_anchor(alert: str) -> str:
    """The anchor GitHub gives the heading ``## <alert>`` in docs/runbooks.md."""
    return alert.lower()
