"""The one trick that stands in for a pod's mount and network namespaces: rewrite the
text a container sees.

A process started on the host cannot have ``/etc/config`` be its ConfigMap or
``web-0.web.ns.svc.cluster.local`` resolve to its peer, so the realiser rewrites
argv, environment values and the mounted ConfigMap/Secret files before the process
sees them:

- every volume ``mountPath`` → the host directory that holds the volume (longest
  first, so ``/data/logs`` wins over ``/data``), matched as a whole path prefix;
- every cluster DNS name (``….svc`` or ``….svc.cluster.local``) → an address, as
  the resolver answers (names it does not know are left alone);
- ``0.0.0.0`` → the pod's own address: "any address of my network namespace".

Pure: :class:`Substitution` holds the mapping and :meth:`Substitution.apply` is a
single regex pass, so a replacement is never rewritten again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketcluster.api.kube import CLUSTER_DOMAIN

_DNS = (
    r"(?<![A-Za-z0-9.-])"
    r"(?P<dns>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
    rf"\.svc(?:\.{re.escape(CLUSTER_DOMAIN)})?)"
    r"(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)
_ANY = r"(?<![0-9.])(?P<any>0\.0\.0\.0)(?![0-9]|\.[0-9])"


def _no_dns(name: str) -> str | None:
    return None


@functools.lru_cache(maxsize=256)
def _pattern(mounts: tuple[tuple[str, str], ...], any_address: bool) -> re.Pattern[str]:
    """The one regex of a container's substitution. Cached: a pod's containers ask
    for the same one at every start and every exec probe."""
    parts = []
    paths = sorted({m for m, _ in mounts if m and m != "/"}, key=len, reverse=True)
    if paths:
        alternatives = "|".join(re.escape(p.rstrip("/")) for p in paths)
        parts.append(rf"(?<![A-Za-z0-9_.\-/])(?P<mount>{alternatives})(?=/|$|[^A-Za-z0-9_.\-])")
    parts.append(_DNS)
    if any_address:
        parts.append(_ANY)
    return re.compile("|".join(parts), re.MULTILINE)


@dataclass(frozen=True)
class Substitution:
    """What one container's text is rewritten with."""

    mounts: tuple[tuple[str, str], ...] = ()  # (mountPath, host path)
    pod_ip: str | None = None
    resolve: Callable[[str], str | None] = field(default=_no_dns, compare=False)

    def apply(self, text: str) -> str:
        hosts = {m.rstrip("/"): h for m, h in self.mounts}

        def replace(match: re.Match[str]) -> str:
            groups = match.groupdict()
            if groups.get("mount"):
                return hosts[groups["mount"]]
            if groups.get("dns"):
                return self.resolve(groups["dns"]) or groups["dns"]
            return self.pod_ip or match[0]

        return _pattern(self.mounts, bool(self.pod_ip)).sub(replace, text)

    def apply_bytes(self, data: bytes) -> bytes:
        """File contents: text is rewritten, anything that is not UTF-8 is left alone."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        return self.apply(text).encode("utf-8")


def expand_vars(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command, args and env values: a defined
    variable is replaced, ``$$`` escapes a dollar, an undefined reference stays."""

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name = match[1]
        return env[name] if name in env else match[0]

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", replace, text)
