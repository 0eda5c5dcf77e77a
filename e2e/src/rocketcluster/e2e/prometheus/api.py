"""The parts of Prometheus' HTTP API the monitoring suite asks: instant queries,
scrape targets, rules and alerts — with errors that carry the PromQL and
Prometheus' own message, so a failing check says which query is wrong and why."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import httpx


class PrometheusAPIError(RuntimeError):
    """Prometheus did not answer, or answered something that is not its API."""


class PromQLError(PrometheusAPIError):
    """Prometheus refused or failed a query: ``error_type`` is its errorType
    (bad_data for a parse error, execution, timeout …), ``error`` its message."""

    def __init__(self, expr: str, error_type: str, error: str) -> None:
        super().__init__(f"{error_type}: {error} (in {expr!r})")
        self.expr = expr
        self.error_type = error_type
        self.error = error


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float  # the newest value for a range vector

    @property
    def is_nan(self) -> bool:
        return math.isnan(self.value)


@dataclass(frozen=True)
class QueryResult:
    expr: str
    result_type: str  # vector | matrix | scalar | string
    samples: list[Sample]

    @property
    def empty(self) -> bool:
        return not self.samples


@dataclass(frozen=True)
class Target:
    job: str
    labels: dict[str, str]
    health: str  # up | down | unknown
    last_error: str
    scrape_url: str


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # pending | firing
    labels: dict[str, str]
    annotations: dict[str, str]
    value: str


@dataclass(frozen=True)
class RuleHealth:
    group: str
    name: str
    kind: str  # alerting | recording
    health: str  # ok | err | unknown
    last_error: str


def _float(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError) as exc:
        raise PrometheusAPIError(f"not a sample value: {text!r}") from exc


def _samples(kind: str, result: Any) -> list[Sample] | None:
    if kind == "vector":
        return [Sample(dict(s["metric"]), _float(s["value"][1])) for s in result]
    if kind == "matrix":
        newest = [(s["metric"], s["values"][-1]) for s in result if s["values"]]
        return [Sample(dict(labels), _float(value[1])) for labels, value in newest]
    if kind == "scalar":
        return [Sample({}, _float(result[1]))]
    if kind == "string":
        return [Sample({"string": str(result[1])}, math.nan)]
    return None


def parse_query_response(expr: str, body: Any) -> QueryResult:
    """The ``data`` of an /api/v1/query answer as samples; an error answer raises
    :class:`PromQLError` (pure: tests feed it recorded answers)."""
    if not isinstance(body, dict) or "status" not in body:
        raise PrometheusAPIError(f"not a Prometheus API answer for {expr!r}: {body!r:.300}")
    if body["status"] != "success":
        raise PromQLError(
            expr, str(body.get("errorType", "unknown")), str(body.get("error", "no message"))
        )
    data: Any = body.get("data") or {}
    kind = str(data.get("resultType", ""))
    result: Any = data.get("result")
    try:
        samples = _samples(kind, result)
    except (KeyError, IndexError, TypeError) as exc:
        raise PrometheusAPIError(f"malformed {kind} result for {expr!r}: {result!r:.300}") from exc
    if samples is None:
        raise PrometheusAPIError(f"unknown resultType {kind!r} for {expr!r}")
    return QueryResult(expr, kind, samples)


class PrometheusAPI:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            answer = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise PrometheusAPIError(f"GET {self.base_url}{path}: {exc!r}") from exc
        try:
            return answer.json()
        except ValueError as exc:
            raise PrometheusAPIError(
                f"GET {self.base_url}{path}: HTTP {answer.status_code}, not JSON: "
                f"{answer.text[:300]!r}"
            ) from exc

    def _data(self, path: str) -> Any:
        body = self._get(path)
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusAPIError(f"GET {self.base_url}{path}: {body!r:.300}")
        return body["data"]

    def ready(self) -> bool:
        try:
            return self._http.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> QueryResult:
        """An instant query now; :class:`PromQLError` when Prometheus rejects it."""
        if not expr.strip():
            raise ValueError("an empty PromQL expression")
        return parse_query_response(expr, self._get("/api/v1/query", {"query": expr}))

    def targets(self) -> list[Target]:
        data = self._data("/api/v1/targets?state=active")
        return [
            Target(
                job=str(t["labels"].get("job", "")),
                labels=dict(t["labels"]),
                health=str(t["health"]),
                last_error=str(t.get("lastError", "")),
                scrape_url=str(t.get("scrapeUrl", "")),
            )
            for t in data["activeTargets"]
        ]

    def alerts(self) -> list[Alert]:
        """Pending and firing alerts, as the rule evaluator holds them."""
        data = self._data("/api/v1/alerts")
        return [
            Alert(
                name=str(a["labels"].get("alertname", "")),
                state=str(a["state"]),
                labels=dict(a["labels"]),
                annotations=dict(a.get("annotations") or {}),
                value=str(a.get("value", "")),
            )
            for a in data["alerts"]
        ]

    def rules(self) -> list[RuleHealth]:
        data = self._data("/api/v1/rules")
        return [
            RuleHealth(
                group=str(g["name"]),
                name=str(r["name"]),
                kind=str(r["type"]),
                health=str(r.get("health", "unknown")),
                last_error=str(r.get("lastError", "")),
            )
            for g in data["groups"]
            for r in g["rules"]
        ]

    # -- waiting ---------------------------------------------------------------------

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise PrometheusAPIError(f"{self.base_url}/-/ready not 200 after {timeout:.0f}s")
            time.sleep(0.2)

    def wait_targets_up(self, expected: int, timeout: float = 60.0) -> list[Target]:
        """Until ``expected`` targets are known and every one is up."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            down = [t for t in targets if t.health != "up"]
            if len(targets) >= expected and not down:
                return targets
            if time.monotonic() > deadline:
                lines = [f"{t.scrape_url} ({t.job}): {t.health} {t.last_error}" for t in down]
                raise PrometheusAPIError(
                    f"{len(targets)} targets known, {len(down)} not up after {timeout:.0f}s "
                    f"(want {expected} up):\n" + "\n".join(lines)
                )
            time.sleep(0.5)

    def wait_query(self, expr: str, timeout: float = 30.0) -> QueryResult:
        """Until an instant query has samples. A target reads "up" in the targets API
        as soon as its scrape is judged, a moment before the scrape's samples are
        committed to the head block and visible to queries."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result.samples:
                return result
            if time.monotonic() > deadline:
                raise PrometheusAPIError(f"{expr!r} returned no samples after {timeout:.0f}s")
            time.sleep(0.25)

    def wait_alert(self, name: str, state: str = "firing", timeout: float = 180.0) -> Alert:
        """Until an alert named ``name`` is in ``state``; the error lists what the
        evaluator holds instead and the rule's health."""
        deadline = time.monotonic() + timeout
        while True:
            alerts = self.alerts()
            for alert in alerts:
                if alert.name == name and alert.state == state:
                    return alert
            if time.monotonic() > deadline:
                held = [f"{a.name} {a.state} {a.labels}" for a in alerts] or ["none"]
                rules = [
                    f"{r.group}/{r.name}: {r.health} {r.last_error}".rstrip()
                    for r in self.rules()
                    if r.name == name
                ] or [f"no rule named {name!r} is loaded"]
                raise PrometheusAPIError(
                    f"alert {name!r} not {state} after {timeout:.0f}s; alerts: "
                    + "; ".join(held)
                    + "; rule: "
                    + "; ".join(rules)
                )
            time.sleep(1.0)
