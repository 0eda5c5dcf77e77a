"""A real Prometheus scrapes a running local cluster (two groups of three replicas,
producing and consuming, one slave stopped): every metric family, every dashboard
panel query and every alert expression returns data or is listed as expected-empty
with its reason, and the stopped slave fires the SyncStateSet alert in Prometheus
itself, from the rules file the chart ships.

A failing check lists every failing query at once, with Prometheus' own error."""

from __future__ import annotations

import functools
import time
from collections import Counter

import pytest

from rocketcluster.ctl.testing import wait_for
from rocketcluster.e2e.prometheus import Alert, Check, judge, metric_checks
from rocketcluster.e2e.prometheus.checks import (
    FAMILY_SUFFIXES,
    duration_seconds,
    evaluate,
    evaluate_until_data,
)
from rocketcluster.operator.monitoring.alerts import CANARY_WINDOW, alerts
from rocketcluster.operator.monitoring.inventory import EXPECTED_EMPTY, METRICS, queries

from .conftest import Monitored

pytestmark = pytest.mark.slow

# Counters appear with their first increment and rate() needs two scrapes after it;
# the DLQ needs a message to outlive its invisibility and be received again.
DATA_TIMEOUT_S = 120
# After the slave stops: haMaxTimeSlaveNotCatchup (8 s) until the master shrinks the
# set, then the rule's `for`; this much more for a loaded machine.
ALERT_MARGIN_S = 120


def _sync_state_set_alert() -> tuple[str, float]:
    found = [a for a in alerts() if "SyncStateSet" in a.name]
    assert len(found) == 1, f"want one SyncStateSet alert, have {[a.name for a in found]}"
    return found[0].name, duration_seconds(found[0].for_)


def _metric_key(name: str) -> str:
    return f"metric:{name}"  # how the inventory names a metric's own query


def _unlisted_metrics(monitored: Monitored) -> list[str]:
    """Our series names Prometheus holds that METRICS does not cover
    (prometheus_client's ``*_created`` series aside: nothing queries them)."""
    answer = monitored.api.query('group by (__name__) ({__name__=~"rocketmq_.*"})')
    names = {s.labels["__name__"] for s in answer.samples}
    covered = {f + suffix for f in METRICS for suffix in FAMILY_SUFFIXES}
    return sorted(n for n in names - covered if not n.endswith("_created"))


def test_expected_empty_entries_name_a_query_and_say_why() -> None:
    sources = Counter(q.source for q in queries())
    twice = sorted(s for s, n in sources.items() if n > 1)
    assert not twice, f"query sources must be unique to be listed as expected-empty: {twice}"
    stale = sorted(k for k in EXPECTED_EMPTY if k not in sources)
    blank = sorted(k for k, reason in EXPECTED_EMPTY.items() if not reason.strip())
    assert not stale, f"EXPECTED_EMPTY names no query source: {stale}"
    assert not blank, f"EXPECTED_EMPTY entries without a reason: {blank}"


def test_every_dashboard_and_alert_query_returns_data(monitored: Monitored) -> None:
    metric_keys = {_metric_key(m) for m in METRICS}  # checked below
    checks = [Check(q.source, q.expr) for q in queries() if q.source not in metric_keys]
    outcomes = evaluate_until_data(
        checks,
        functools.partial(evaluate, monitored.api),
        timeout=DATA_TIMEOUT_S,
        may_stay_empty=EXPECTED_EMPTY,
    )
    verdict = judge(outcomes, EXPECTED_EMPTY)
    report = verdict.report("dashboard and alert queries")
    print(report)
    assert not verdict.failures, f"{report}\ntraffic: {monitored.traffic_summary()}"


def test_every_metric_has_series(monitored: Monitored) -> None:
    """Each METRICS name (a family's name matches its suffixed series too). After
    the queries: by then the slow starters (the DLQ counter) have had their time."""
    checks = [Check(_metric_key(c.key), c.expr) for c in metric_checks(METRICS)]
    outcomes = evaluate_until_data(
        checks,
        functools.partial(evaluate, monitored.api),
        timeout=DATA_TIMEOUT_S,
        may_stay_empty=EXPECTED_EMPTY,
    )
    verdict = judge(outcomes, EXPECTED_EMPTY)
    report = verdict.report("metrics")
    unlisted = _unlisted_metrics(monitored)
    if unlisted:
        report += "\n  scraped but not in METRICS: " + ", ".join(unlisted)
    print(report)
    assert not verdict.failures, f"{report}\ntraffic: {monitored.traffic_summary()}"


def test_every_alert_rule_is_loaded_and_evaluates_without_error(monitored: Monitored) -> None:
    rules = monitored.api.rules()
    loaded = {r.name for r in rules if r.kind == "alerting"}
    assert loaded == {a.name for a in alerts()}
    broken = [f"{r.name}: {r.last_error}" for r in rules if r.health == "err"]
    assert not broken, "rules Prometheus cannot evaluate:\n" + "\n".join(broken)


def test_the_stopped_slave_fires_the_sync_state_set_alert(monitored: Monitored) -> None:
    name, hold = _sync_state_set_alert()
    # Pending: the master's SyncStateSet has shrunk, which the stopped slave cannot
    # undo, so the minute of ``for:`` needs no traffic.
    wait_for(
        lambda: any(a.name == name and a.state != "inactive" for a in monitored.api.alerts()),
        ALERT_MARGIN_S,
        1.0,
        f"{name} pending or firing (the stopped slave out of the SyncStateSet)",
    )
    monitored.quiet()
    alert = monitored.api.wait_alert(name, "firing", timeout=hold + ALERT_MARGIN_S)
    print(f"{name} firing {time.monotonic() - monitored.stopped_at:.0f}s after the slave stopped")
    assert alert.labels.get("group") == monitored.degraded_group, alert
    assert float(alert.value) == 2.0, alert  # the master and the slave still running
    assert alert.labels.get("severity") == "critical"
    assert alert.annotations.get("runbook_url", "").endswith(f"#{name.lower()}")
    healthy = [
        a
        for a in monitored.api.alerts()
        if a.name == name and a.labels.get("group") == monitored.healthy_group
    ]
    assert not healthy, f"the group with every replica running alerts too: {healthy}"


def _canary_alerts(monitored: Monitored, name: str) -> list[Alert]:
    return [a for a in monitored.api.alerts() if a.name == name]


def test_a_failing_group_fires_the_canary_alert(monitored: Monitored) -> None:
    """The canary's probes of the degraded group have failed since its slave stopped
    (three in-sync replicas needed, two left: every send is refused), those of the
    other group succeed: the alert fires for the degraded group alone."""
    (rule,) = [a for a in alerts() if a.name.endswith("CanaryFailing")]
    window = duration_seconds(CANARY_WINDOW)
    monitored.quiet()  # nothing left to happen needs the traffic
    firing = wait_for(
        lambda: [
            a
            for a in _canary_alerts(monitored, rule.name)
            if a.state == "firing" and a.labels.get("group") == monitored.degraded_group
        ],
        window + duration_seconds(rule.for_) + ALERT_MARGIN_S,
        1.0,
        f"{rule.name} firing for {monitored.degraded_group}",
    )
    probes = monitored.api.query("sum by (group, result) (rocketmq_canary_probes_total)")
    counts = sorted((s.labels["group"], s.labels["result"], int(s.value)) for s in probes.samples)
    print(
        f"{rule.name} firing {time.monotonic() - monitored.stopped_at:.0f}s after the slave "
        f"stopped; canary probes (group, result, count): {counts}"
    )
    (alert,) = firing
    assert alert.labels.get("severity") == "critical"
    assert alert.annotations.get("runbook_url", "").endswith(f"#{rule.name.lower()}")
    healthy = [
        a
        for a in _canary_alerts(monitored, rule.name)
        if a.labels.get("group") == monitored.healthy_group
    ]
    assert not healthy, f"the group whose probes succeed alerts too: {healthy}"
    ratio = f'rocketmq_canary_success_ratio{{group="{monitored.healthy_group}"}}'
    ok = monitored.api.query(ratio).samples
    assert [s.value for s in ok] == [1.0], ok
