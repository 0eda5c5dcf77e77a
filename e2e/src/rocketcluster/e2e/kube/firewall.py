"""NetworkPolicies enforced on this host: identity by cgroup, decisions by address, as
Kubernetes network plugins do (the decisions themselves are :mod:`netpol`'s).

Every pod address lives on the loopback network, so any local process could reach
any pod, and a pod's outgoing connection leaves from 127.0.0.1. Three pieces make
the source of a connection the pod that made it and judge it:

- **a cgroup per pod** (cgroup v2, ``<mount>/rocketcluster-realiser-<block>/<uid>``):
  the launcher puts each container's process into it before it execs (see
  :func:`join_argv`), so every socket it and its children make belongs to the pod;
- **SNAT** (nat chain ``RCSNAT-<block>``, jumped from POSTROUTING for the pod and
  service networks): a connection from a pod's cgroup to a pod or Service address
  leaves from the pod's own address (``-m cgroup --path``);
- **a filter chain** ``RCNP-<block>``, jumped from INPUT for this realiser's block,
  in order: established → RETURN; sources outside the pod network (the node: tests,
  probes, the host operator — network plugins admit the node too) → RETURN; a pod
  to itself → RETURN; every allowed (source, destination, port) → RETURN (an
  ``ipBlock`` with ``except`` through a chain ``RCNPE-<block>-<n>`` of its own); a
  new connection to an isolated pod → REJECT with a TCP reset, commented with the
  pod's name, whose packet counter is the "refused by policy" report.

The rules are written with one ``iptables-restore --noflush`` (atomic), only when
their text changes. Chains carry the block's name: the ``flock`` on the block
(:func:`network.reserve_block`) proves they are ours, so at start whatever of them a
killed realiser left is swept, and other realisers' chains are never touched. A
cgroup goes once its pod's rule is gone and its processes have exited.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocketcluster.e2e.kube import network
from rocketcluster.e2e.kube.netpol import ANY, Ruleset

log = logging.getLogger("rocketcluster.realiser.firewall")

MODES = ("enforce", "off")
CGROUP_PREFIX = "rocketcluster-realiser-"
TIMEOUT_S = 30.0
# Joins the cgroup whose cgroup.procs is $0, then becomes the container's process.
_JOIN = (
    '{ echo $$ > "$0"; } 2>/dev/null || { echo "cannot join cgroup $0" >&2; exit 126; }; exec "$@"'
)


class FirewallError(RuntimeError):
    """iptables refused the rules (the message has its output)."""


def cgroup2_mount(mounts: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (pure cgroup2 or the hybrid
    layout's ``unified``), from /proc/self/mounts."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def unavailable() -> str | None:
    """Why policies cannot be enforced on this host, or None."""
    if os.geteuid() != 0:
        return "the realiser is not root (iptables and cgroups need it)"
    for tool in ("iptables", "iptables-restore", "iptables-save"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install iptables)"
    if shutil.which("sh") is None:
        return "no sh to join a pod's cgroup with"
    root = cgroup2_mount()
    if root is None:
        return "no cgroup v2 hierarchy is mounted"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable"
    return None


def join_argv(procs: str, argv: list[str], sh: str = "/bin/sh") -> list[str]:
    """``argv`` run after its process joined the cgroup whose ``cgroup.procs`` is
    ``procs`` — a plain exec chain, no ``preexec_fn`` (processes.dying_with_parent
    says why)."""
    return [sh, "-c", _JOIN, procs, *argv]


def block_tag(block: ipaddress.IPv4Network) -> str:
    return f"{str(block.network_address).replace('.', '-')}-{block.prefixlen}"


def _run(argv: list[str], stdin: str | None = None) -> str:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        raise FirewallError(f"{' '.join(argv[:3])}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


class Firewall:
    """The iptables chains and cgroups of one realiser's address block."""

    def __init__(
        self,
        block: ipaddress.IPv4Network,
        pod_network: ipaddress.IPv4Network,
        service_network: ipaddress.IPv4Network,
        *,
        cgroup_root: Path | None = None,
    ) -> None:
        self.block = block
        self.pod_network = pod_network
        self.service_network = service_network
        tag = block_tag(block)
        self.filter_chain = f"RCNP-{tag}"
        self.except_prefix = f"RCNPE-{tag}-"
        self.nat_chain = f"RCSNAT-{tag}"
        root = cgroup_root or cgroup2_mount()
        if root is None:
            raise FirewallError("no cgroup v2 hierarchy is mounted")
        self.cgroup_root = root
        self.parent = root / f"{CGROUP_PREFIX}{tag}"
        self._digest = ""
        self._except_chains: list[str] = []
        self.cgroups: dict[str, str] = {}  # pod uid -> its address

    # --- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        """Sweep what a previous holder of the block left, then install the (empty)
        chains and their jumps."""
        self.sweep()
        self.parent.mkdir(exist_ok=True)
        pod_net, svc_net = str(self.pod_network), str(self.service_network)
        _run(
            ["iptables-restore", "-w", "--noflush"],
            "\n".join(
                [
                    "*nat",
                    f":{self.nat_chain} - [0:0]",
                    f"-A POSTROUTING -d {pod_net} -j {self.nat_chain}",
                    f"-A POSTROUTING -d {svc_net} -j {self.nat_chain}",
                    "COMMIT",
                    "*filter",
                    f":{self.filter_chain} - [0:0]",
                    f"-I INPUT -d {self.block} -j {self.filter_chain}",
                    "COMMIT",
                    "",
                ]
            ),
        )
        self._digest = ""

    def sweep(self) -> None:
        """Remove this block's jumps, chains and cgroups, whoever made them."""
        ours = re.compile(
            rf"(?:{re.escape(self.filter_chain)}|{re.escape(self.nat_chain)}"
            rf"|{re.escape(self.except_prefix)}\d+)$"
        )
        script: list[str] = []
        for table in ("nat", "filter"):
            saved = _run(["iptables-save", "-t", table])
            chains = [
                line[1:].split()[0]
                for line in saved.splitlines()
                if line.startswith(":") and ours.match(line[1:].split()[0])
            ]
            jumps = [
                "-D" + line[2:]
                for line in saved.splitlines()
                if line.startswith("-A ")
                and line.split()[1] in ("INPUT", "POSTROUTING")
                and ours.match(line.split()[-1])
            ]
            if not chains and not jumps:
                continue
            script += [f"*{table}", *jumps]
            script += [f"-F {c}" for c in chains] + [f"-X {c}" for c in chains]
            script.append("COMMIT")
        if script:
            _run(["iptables-restore", "-w", "--noflush"], "\n".join([*script, ""]))
        if self.parent.is_dir():
            for child in self.parent.iterdir():
                if child.is_dir():
                    _rmdir(child)
            _rmdir(self.parent)
        self.cgroups.clear()
        self._except_chains = []
        self._digest = ""

    def stop(self) -> list[str]:
        """Remove everything; the cgroups that could not go (processes left in them)."""
        self.sweep()
        return [str(p) for p in self.parent.iterdir()] if self.parent.is_dir() else []

    # --- pods ----------------------------------------------------------------------

    def cgroup(self, uid: str, ip: str) -> str:
        """The ``cgroup.procs`` a process of pod ``uid`` (at ``ip``) joins (made now)."""
        path = self.parent / uid
        path.mkdir(parents=True, exist_ok=True)
        self.cgroups[uid] = ip
        return str(path / "cgroup.procs")

    def release(self, uid: str) -> bool:
        """Remove pod ``uid``'s cgroup (call after :meth:`apply` without it); False
        while processes are still in it."""
        if uid not in self.cgroups:
            return True
        if _rmdir(self.parent / uid):
            del self.cgroups[uid]
            return True
        return False

    # --- rules ---------------------------------------------------------------------

    def render(self, rules: Ruleset, snat: Mapping[str, str]) -> tuple[str, list[str]]:
        """The iptables-restore text for ``rules`` (only destinations in the block)
        and the SNAT of ``snat`` (pod uid → address), and the except chains it uses."""
        rel = self.parent.relative_to(self.cgroup_root)
        nat = ["*nat", f":{self.nat_chain} - [0:0]"]
        for uid, ip in sorted(snat.items()):
            nat.append(f"-A {self.nat_chain} -m cgroup --path {rel}/{uid} -j SNAT --to-source {ip}")
        nat.append("COMMIT")
        mine = sorted(ip for ip in rules.isolated if ipaddress.ip_address(ip) in self.block)
        excepts: list[str] = []
        body = [
            f"-A {self.filter_chain} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
            f"-A {self.filter_chain} ! -s {self.pod_network} -j RETURN",
        ]
        body += [f"-A {self.filter_chain} -s {ip} -d {ip} -j RETURN" for ip in mine]
        chains: list[str] = []
        for allow in sorted(a for a in rules.allowed if a.dst in mine):
            ports = (
                str(allow.port)
                if allow.port == allow.end_port
                else f"{allow.port}:{allow.end_port}"
            )
            src = "" if allow.src == ANY else f" -s {allow.src}"
            match = f"{src} -d {allow.dst} -p tcp -m tcp --dport {ports}"
            if not allow.excepts:
                body.append(f"-A {self.filter_chain}{match} -j RETURN")
                continue
            chain = f"{self.except_prefix}{len(excepts)}"
            excepts.append(chain)
            body.append(f"-A {self.filter_chain}{match} -j {chain}")
            chains += [f"-A {chain} -s {e} -j RETURN" for e in allow.excepts]
            chains.append(f"-A {chain} -j ACCEPT")
        for ip in mine:
            name = rules.names.get(ip, ip).replace('"', "")
            body.append(
                f'-A {self.filter_chain} -d {ip} -p tcp -m tcp --syn -m comment --comment "{name}"'
                " -j REJECT --reject-with tcp-reset"
            )
        stale = [c for c in self._except_chains if c not in excepts]
        filt = [
            "*filter",
            f":{self.filter_chain} - [0:0]",
            *(f":{c} - [0:0]" for c in excepts),
            *body,
            *chains,
            *(f"-F {c}" for c in stale),
            *(f"-X {c}" for c in stale),
            "COMMIT",
        ]
        return "\n".join([*nat, *filt, ""]), excepts

    def apply(self, rules: Ruleset, snat: Mapping[str, str]) -> bool:
        """Write the rules when their text changed; True when it was written."""
        text, excepts = self.render(rules, snat)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._digest:
            return False
        _run(["iptables-restore", "-w", "--noflush"], text)
        self._digest, self._except_chains = digest, excepts
        return True

    def refusals(self) -> dict[str, int]:
        """Connections refused by policy so far, per pod ("namespace/name")."""
        out: dict[str, int] = {}
        pattern = re.compile(
            rf"\[(\d+):\d+\] -A {re.escape(self.filter_chain)} "
            r'.*--comment "?([^"]+?)"? -j REJECT'
        )
        for line in _run(["iptables-save", "-c", "-t", "filter"]).splitlines():
            m = pattern.match(line)
            if m:
                out[m[2]] = out.get(m[2], 0) + int(m[1])
        return out


def refusals_of(state: Mapping[str, Any]) -> dict[str, int]:
    """The refusals so far of the realiser whose ``realiser.json`` is ``state`` (read
    from its chain's counters); {} when it does not enforce policies."""
    if state.get("networkPolicies") != "enforced":
        return {}
    block = ipaddress.ip_network(str(state["podNetwork"]))
    if not isinstance(block, ipaddress.IPv4Network):
        raise ValueError(f"not an IPv4 block: {block}")
    return Firewall(block, network.POD_NETWORK, network.SERVICE_NETWORK).refusals()


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("cannot remove cgroup %s: %s", path, exc)
        return False
    return True
