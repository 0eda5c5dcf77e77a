"""Container probes as kubelet runs them: httpGet, tcpSocket and exec (grpc is
checked as a TCP connect), with the spec's delay, period, timeout and thresholds.

:class:`ProbeSchedule` is the pure part — thresholds and timing, fed with results;
:func:`probe_once` does one check. Periods below :data:`MIN_PERIOD_S` are raised to
it, and a realiser option may cap long periods so tests do not wait 10 s between
readiness checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from rocketcluster.e2e.kube.processes import dying_with_parent, killpg

MIN_PERIOD_S = 0.5


@dataclass
class ProbeSchedule:
    """When to probe next and what the results add up to."""

    spec: Mapping[str, Any]
    initial: bool  # the result before the first success/failure (Ready: False)
    period_cap: float | None = None
    successes: int = 0
    failures: int = 0
    result: bool = False

    def __post_init__(self) -> None:
        self.result = self.initial

    @property
    def delay(self) -> float:
        return float(self.spec.get("initialDelaySeconds", 0))

    @property
    def period(self) -> float:
        period = max(MIN_PERIOD_S, float(self.spec.get("periodSeconds", 10)))
        return min(period, self.period_cap) if self.period_cap else period

    @property
    def timeout(self) -> float:
        return max(0.5, float(self.spec.get("timeoutSeconds", 1)))

    @property
    def failed(self) -> bool:
        """As many failures in a row as ``failureThreshold``: a liveness or startup
        probe's container is to be restarted."""
        return self.failures >= int(self.spec.get("failureThreshold", 3))

    def record(self, ok: bool) -> bool:
        """Feed one check; True when the overall result flipped."""
        before = self.result
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.spec.get("successThreshold", 1)):
                self.result = True
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.failed:
                self.result = False
        return self.result != before


def _port(value: Any, ports: Mapping[str, int]) -> int:
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    if value in ports:
        return ports[value]
    raise ValueError(f"no container port named {value!r}")


async def probe_once(
    spec: Mapping[str, Any],
    *,
    pod_ip: str,
    ports: Mapping[str, int],
    argv: list[str] | None,
    env: Mapping[str, str],
    cwd: str,
    http: httpx.AsyncClient,
    limit_s: float,
) -> bool:
    """One check; an error of any kind is a failure, as for kubelet. ``argv`` is
    the exec command, already substituted."""
    try:
        if "httpGet" in spec:
            get = spec["httpGet"]
            scheme = str(get.get("scheme", "HTTP")).lower()
            host = get.get("host") or pod_ip
            url = f"{scheme}://{host}:{_port(get.get('port'), ports)}{get.get('path', '/')}"
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
            response = await http.get(url, headers=headers, timeout=limit_s)
            return 200 <= response.status_code < 400
        if "tcpSocket" in spec or "grpc" in spec:
            sock = spec.get("tcpSocket") or spec.get("grpc") or {}
            host = sock.get("host") or pod_ip
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, _port(sock.get("port"), ports)), limit_s
            )
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        if "exec" in spec and argv:
            return await _exec(argv, env, cwd, limit_s)
    except (OSError, ValueError, httpx.HTTPError, TimeoutError):
        return False
    return False


async def _exec(argv: list[str], env: Mapping[str, str], cwd: str, limit_s: float) -> bool:
    proc = await asyncio.create_subprocess_exec(
        *dying_with_parent(argv, env, cwd),
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return await asyncio.wait_for(proc.wait(), limit_s) == 0
    except TimeoutError:
        return False
    finally:
        if proc.returncode is None:
            killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
