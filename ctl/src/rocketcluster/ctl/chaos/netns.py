"""Network namespaces for the chaos suite (e2e/chaos/README.md).

A "switch" namespace holds a bridge; every controller and broker gets a namespace of
its own with a veth into the bridge, named ``eth0`` inside and an address in
10.77.0.0/24; the runner (workload, group endpoints, checker) keeps the namespace it
runs in and joins the bridge as 10.77.0.1. Faults are iptables rules in a node's
namespace, in two chains of our own (``RC-CHAOS-IN``/``RC-CHAOS-OUT``) that INPUT
and OUTPUT jump to, so healing deletes exactly the rules a fault added and nothing
else is ever touched. A baseline conntrack rule at setup makes the kernel track
connections in every namespace from the start, which one-way partitions need.

Everything here runs inside the contained run (``unshare --net --mount --pid``):
the namespaces vanish with it even if cleanup is skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "rcchaos"
SUBNET = "10.77.0"
RUNNER_ADDRESS = f"{SUBNET}.1"
IN_CHAIN = "RC-CHAOS-IN"
OUT_CHAIN = "RC-CHAOS-OUT"


class NetworkError(RuntimeError):
    pass


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


def ensure_iptables() -> str | None:
    """Install iptables when missing (apt-get; ``apt-get update`` first if the plain
    install fails). Returns why it is unavailable, or None. Must run before the
    contained run: inside it there is no network to download from."""
    if shutil.which("iptables"):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "iptables is missing and cannot be installed here (not root or no apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "iptables"]
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
        subprocess.run(install, capture_output=True, env=env, check=False)
    return None if shutil.which("iptables") else "apt-get install iptables failed"


@dataclass(frozen=True)
class Node:
    """One process's namespace: ``exec_prefix`` runs a command inside it."""

    name: str
    namespace: str
    address: str
    index: int

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


@dataclass(frozen=True)
class Rule:
    """One iptables rule in one namespace: what a fault adds and its heal deletes."""

    namespace: str
    chain: str
    spec: tuple[str, ...]


@dataclass
class Network:
    prefix: str = PREFIX
    nodes: dict[str, Node] = field(default_factory=dict)
    built: bool = False

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    # -- life cycle ----------------------------------------------------------------

    def sweep(self) -> list[str]:
        """Delete namespaces left by an earlier run (by our prefix only); processes
        still inside are reported, never signalled: they are not ours to end."""
        notes = []
        listing = sh("ip", "netns", "list", check=False).stdout.split("\n")
        for line in listing:
            name = line.split(" ")[0].strip()
            if not name.startswith(f"{self.prefix}-"):
                continue
            pids = sh("ip", "netns", "pids", name, check=False).stdout.split()
            if pids:
                notes.append(f"stale namespace {name} still holds pids {pids}")
            sh("ip", "netns", "del", name, check=False)
            notes.append(f"deleted stale namespace {name}")
        return notes

    def build(self, names: list[str]) -> dict[str, Node]:
        """The switch, one namespace per name (10.77.0.10+i), and the runner's link."""
        sh("ip", "link", "set", "lo", "up")
        sh("ip", "netns", "add", self.switch)
        self.built = True
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        self._link(None, "rcr0", RUNNER_ADDRESS)
        for i, name in enumerate(names):
            node = Node(name, f"{self.prefix}-n{i}", f"{SUBNET}.{10 + i}", i)
            sh("ip", "netns", "add", node.namespace)
            sh("ip", "-n", node.namespace, "link", "set", "lo", "up")
            self._link(node.namespace, f"rcv{i}", node.address)
            self._baseline(node.namespace)
            self.nodes[name] = node
        return dict(self.nodes)

    def _link(self, namespace: str | None, veth: str, address: str) -> None:
        peer = f"{veth}p"
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
        sh("ip", "link", "set", peer, "netns", self.switch)
        sh("ip", "-n", self.switch, "link", "set", peer, "master", "br0", "up")
        if namespace is None:
            sh("ip", "addr", "add", f"{address}/24", "dev", veth)
            sh("ip", "link", "set", veth, "up")
            return
        sh("ip", "link", "set", veth, "netns", namespace)
        sh("ip", "-n", namespace, "link", "set", veth, "name", "eth0")
        sh("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", namespace, "link", "set", "eth0", "up")

    def _baseline(self, namespace: str) -> None:
        ipt = ["ip", "netns", "exec", namespace, "iptables", "-w"]
        # Counts only (no target): its presence makes conntrack track this namespace.
        sh(*ipt, "-A", "INPUT", "-m", "conntrack", "--ctstate", "NEW")
        for chain, hook in ((IN_CHAIN, "INPUT"), (OUT_CHAIN, "OUTPUT")):
            sh(*ipt, "-N", chain)
            sh(*ipt, "-A", hook, "-j", chain)

    def teardown(self) -> None:
        for node in self.nodes.values():
            sh("ip", "netns", "del", node.namespace, check=False)
        if self.built:
            sh("ip", "netns", "del", self.switch, check=False)
        with contextlib.suppress(NetworkError):
            sh("ip", "link", "del", "rcr0", check=False)
        self.nodes.clear()
        self.built = False

    # -- rules -----------------------------------------------------------------------

    def add(self, rules: list[Rule]) -> None:
        for rule in rules:
            _iptables(rule, "-A")

    def delete(self, rules: list[Rule]) -> None:
        for rule in rules:
            _iptables(rule, "-D", check=False)

    def flush_all(self) -> None:
        """The final heal: no fault rule survives, whatever happened before."""
        for node in self.nodes.values():
            for chain in (IN_CHAIN, OUT_CHAIN):
                _iptables_in(node.namespace, "-F", chain, check=False)

    def rule_count(self) -> int:
        total = 0
        for node in self.nodes.values():
            for chain in (IN_CHAIN, OUT_CHAIN):
                out = _iptables_in(node.namespace, "-S", chain, check=False).stdout
                total += sum(1 for line in out.splitlines() if line.startswith("-A "))
        return total


# -- rule builders (pure) --------------------------------------------------------------


def isolate(node: Node) -> list[Rule]:
    """Full partition: nothing in or out on eth0 (loopback stays up)."""
    return [
        Rule(node.namespace, IN_CHAIN, ("-i", "eth0", "-j", "DROP")),
        Rule(node.namespace, OUT_CHAIN, ("-o", "eth0", "-j", "DROP")),
    ]


def cut_from(node: Node, peers: list[Node]) -> list[Rule]:
    """Partition ``node`` from ``peers`` only, both directions."""
    rules = []
    for peer in peers:
        rules.append(Rule(node.namespace, IN_CHAIN, ("-s", peer.address, "-j", "DROP")))
        rules.append(Rule(node.namespace, OUT_CHAIN, ("-d", peer.address, "-j", "DROP")))
    return rules


def grudges(groups: list[list[Node]]) -> dict[str, set[str]]:
    """Who may not talk to whom (pure), from the sides of a partition: two nodes that
    share no side are cut off from each other. A node on two sides (a bridge) talks
    to both. Answers node name -> names it is cut from."""
    sides_of: dict[str, set[int]] = {}
    for i, side in enumerate(groups):
        for node in side:
            sides_of.setdefault(node.name, set()).add(i)
    return {
        a: {b for b, theirs in sides_of.items() if b != a and not (mine & theirs)}
        for a, mine in sides_of.items()
    }


def halves(nodes: list[Node]) -> list[list[Node]]:
    """A symmetric split into two halves (the first the larger)."""
    cut = (len(nodes) + 1) // 2
    return [nodes[:cut], nodes[cut:]]


def bridge(nodes: list[Node]) -> list[list[Node]]:
    """Jepsen's bridge: two halves, and one node in the middle that belongs to both —
    each side sees it, neither sees the other."""
    middle = len(nodes) // 2
    return [nodes[: middle + 1], nodes[middle:]]


def majorities_ring(nodes: list[Node]) -> dict[str, set[str]]:
    """Jepsen's majorities ring: every node sees a majority of the nodes — itself and
    its nearest neighbours on a ring — and no two nodes see the same majority. Answers
    the grudges directly (node name -> names it is cut from)."""
    n = len(nodes)
    reach = (n // 2 + 1) // 2  # itself and 2*reach neighbours: a majority
    cut: dict[str, set[str]] = {}
    for i, node in enumerate(nodes):
        cut[node.name] = {
            other.name for j, other in enumerate(nodes) if min((i - j) % n, (j - i) % n) > reach
        }
    return cut


def isolate_from(nodes: dict[str, Node], cut: dict[str, set[str]]) -> list[Rule]:
    """The rules that make ``cut`` true: each node drops what comes from, and what
    goes to, every node it is cut from (both ends hold the rule: symmetric)."""
    rules: list[Rule] = []
    for name, others in sorted(cut.items()):
        if others:
            rules += cut_from(nodes[name], [nodes[o] for o in sorted(others)])
    return rules


def refuse_inbound(node: Node) -> list[Rule]:
    """One-way: connections others open to ``node`` die (their packets in the
    ORIGINAL direction are dropped on arrival); ``node``'s own connections work."""
    return [
        Rule(
            node.namespace,
            IN_CHAIN,
            ("-i", "eth0", "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"),
        )
    ]


def refuse_outbound(node: Node) -> list[Rule]:
    """One-way: connections ``node`` opens die; connections to it still work."""
    return [
        Rule(
            node.namespace,
            OUT_CHAIN,
            ("-o", "eth0", "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"),
        )
    ]


def lossy(node: Node, probability: float) -> list[Rule]:
    """Random packet loss both ways (no tc netem on this kernel: iptables statistic)."""
    p = f"{probability:.4f}"
    return [
        Rule(
            node.namespace,
            IN_CHAIN,
            ("-i", "eth0", "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"),
        ),
        Rule(
            node.namespace,
            OUT_CHAIN,
            ("-o", "eth0", "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"),
        ),
    ]


PROBE = (
    "ip link add rcprobe type veth peer name rcprobep"
    " && ip link add rcprobebr type bridge"
    " && iptables -w -A INPUT -m conntrack --ctstate NEW"
    " && iptables -w -A INPUT -m statistic --mode random --probability 0.5 -j DROP"
)


def namespaces_usable() -> str | None:
    """Why network namespaces cannot be used here, or None. Tried for real in a
    throw-away network namespace (veth, bridge, the iptables matches the faults use),
    because capabilities and kernel modules are hard to predict inside sandboxes."""
    if os.geteuid() != 0:
        return "not running as root"
    for tool in ("ip", "unshare", "iptables"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    result = subprocess.run(
        ["unshare", "--net", "--mount", "--fork", "sh", "-c", PROBE],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return f"cannot build the test network: {result.stderr.strip() or result.returncode}"
    return None


def _iptables(rule: Rule, action: str, *, check: bool = True) -> None:
    """Append (``-A``) or delete (``-D``) exactly ``rule`` in its namespace."""
    _iptables_in(rule.namespace, action, rule.chain, *rule.spec, check=check)


def _iptables_in(
    namespace: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", namespace, "iptables", "-w", *args, check=check)
