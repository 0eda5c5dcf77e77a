"""Does every metric and every query have data? Checks against a live Prometheus,
judged all at once so one failing run names every broken query, not the first.

``judge`` is pure (outcomes and the expected-empty list in, a verdict out); the
shell around it evaluates checks through :class:`PrometheusAPI` and re-asks the
empty ones until a deadline, since counters appear with their first increment and
``rate`` needs two scrapes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rocketcluster.e2e.prometheus.api import PrometheusAPI, PromQLError

# What a family name may carry as a series name (prometheus_client's suffixes).
FAMILY_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created", "_info")


@dataclass(frozen=True)
class Check:
    key: str  # a query's source, or a metric family's name
    expr: str


@dataclass(frozen=True)
class Outcome:
    key: str
    expr: str
    series: int  # series with a number (NaN does not count)
    nan_series: int = 0
    error: str | None = None

    @property
    def has_data(self) -> bool:
        return self.error is None and self.series > 0


@dataclass
class Verdict:
    failures: list[str] = field(default_factory=list)
    still_empty: dict[str, str] = field(default_factory=dict)  # expected-empty: key -> reason
    unexpectedly_with_data: list[str] = field(default_factory=list)
    passed: int = 0

    def report(self, what: str) -> str:
        lines = [f"{what}: {self.passed} with data, {len(self.failures)} failing"]
        lines += [f"  FAIL {f}" for f in self.failures]
        if self.still_empty:
            lines.append(f"  expected empty and empty ({len(self.still_empty)}):")
            lines += [f"    {k}: {r}" for k, r in sorted(self.still_empty.items())]
        if self.unexpectedly_with_data:
            lines.append("  listed as expected-empty but returned data (drop the entry?):")
            lines += [f"    {k}" for k in self.unexpectedly_with_data]
        return "\n".join(lines)


def family_expr(family: str) -> str:
    """Every series of a metric family, whichever suffix its type adds."""
    if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", family):
        raise ValueError(f"{family!r} is not a Prometheus metric name")
    suffixes = "|".join(s for s in FAMILY_SUFFIXES if s)
    return f'{{__name__=~"{re.escape(family)}({suffixes})?"}}'


def metric_checks(families: Iterable[str]) -> list[Check]:
    return [Check(f, family_expr(f)) for f in families]


def judge(outcomes: Sequence[Outcome], expected_empty: Mapping[str, str]) -> Verdict:
    """A query that errors fails, listed or not; an empty one fails unless listed as
    expected-empty with a reason."""
    verdict = Verdict()
    for o in outcomes:
        listed = o.key in expected_empty
        reason = expected_empty.get(o.key, "").strip()
        if o.error is not None:
            verdict.failures.append(f"{o.key}: PromQL error {o.error}")
        elif listed and not reason:
            verdict.failures.append(f"{o.key}: listed as expected-empty without a reason")
        elif o.has_data:
            verdict.passed += 1
            if listed:
                verdict.unexpectedly_with_data.append(o.key)
        elif listed:
            verdict.still_empty[o.key] = reason
        else:
            nan = f" (only NaN in {o.nan_series} series)" if o.nan_series else ""
            verdict.failures.append(f"{o.key}: no data{nan} from {o.expr}")
    return verdict


def evaluate(api: PrometheusAPI, check: Check) -> Outcome:
    try:
        result = api.query(check.expr)
    except PromQLError as exc:
        return Outcome(check.key, check.expr, 0, error=str(exc))
    nan = sum(1 for s in result.samples if s.is_nan)
    return Outcome(check.key, check.expr, len(result.samples) - nan, nan)


def evaluate_until_data(
    checks: Sequence[Check],
    ask: Callable[[Check], Outcome],
    *,
    timeout: float,
    interval: float = 2.0,
    may_stay_empty: Collection[str] = (),
) -> list[Outcome]:
    """Ask every check, then re-ask the empty ones until each has data or
    ``timeout`` passes. Checks whose key is in ``may_stay_empty`` are not waited
    for (they are asked once more at the end, so the verdict can tell which of them
    have data by then); an erroring query is not re-asked (PromQL errors do not heal).
    """
    outcomes = [ask(c) for c in checks]

    def empty(waited_for: bool) -> list[int]:
        return [
            i
            for i, o in enumerate(outcomes)
            if not o.has_data and o.error is None and (o.key not in may_stay_empty) == waited_for
        ]

    deadline = time.monotonic() + timeout
    while (pending := empty(True)) and time.monotonic() < deadline:
        time.sleep(interval)
        for i in pending:
            outcomes[i] = ask(checks[i])
    for i in empty(False):
        outcomes[i] = ask(checks[i])
    return outcomes


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_seconds(text: str) -> float:
    """A Prometheus duration (``1m``, ``1h30m``, ``500ms``; empty is 0) in seconds."""
    if not text:
        return 0.0
    parts = _DURATION.findall(text)
    if "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a Prometheus duration (like 30s, 5m, 1h30m)")
    return float(sum(int(n) * _UNIT_S[u] for n, u in parts))
