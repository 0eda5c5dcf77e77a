"""A real Prometheus (the Debian package's binary) against a local cluster: its
configuration made from ``cluster.json``, the server started and stopped by PID, and
the API calls and checks the monitoring suite makes."""

from rocketcluster.e2e.prometheus.api import (
    Alert,
    PrometheusAPI,
    PrometheusAPIError,
    PromQLError,
    QueryResult,
    Sample,
    Target,
)
from rocketcluster.e2e.prometheus.checks import Check, Outcome, Verdict, judge, metric_checks
from rocketcluster.e2e.prometheus.config import JOBS, ConfigError, prometheus_config, render_config
from rocketcluster.e2e.prometheus.server import (
    INSTALL_HINT,
    PrometheusServer,
    PrometheusUnavailable,
    find_binary,
    running_prometheus,
)

__all__ = [
    "INSTALL_HINT",
    "JOBS",
    "Alert",
    "Check",
    "ConfigError",
    "Outcome",
    "PromQLError",
    "PrometheusAPI",
    "PrometheusAPIError",
    "PrometheusServer",
    "PrometheusUnavailable",
    "QueryResult",
    "Sample",
    "Target",
    "Verdict",
    "find_binary",
    "judge",
    "metric_checks",
    "prometheus_config",
    "render_config",
    "running_prometheus",
]
