"""After a master failover, an official consumer drains every group to zero lag without
stalling (issue #25), with the Python client (NORMAL and FIFO topics) and the Node.js
client, on ``examples/cluster.yaml`` (two groups of three replicas, sync on two).

The scenario, as users run it, here for three applications at once (one per client,
each with a topic and a consumer group of its own): the official Producers send in a
loop; the master of the first group is SIGKILLed; they go on, then stop (every send
they counted was acknowledged); then, one after the other, a SimpleConsumer of a group
that never consumed drains each topic, acknowledging each message. The same three
drains without the failover, in the same order in the same module, give the rates to
compare with. (One failover for the three, not one each: a third of the time.)

Each drain must consume every acknowledged message, must never meet four empty
receives in a row while a master reports lag (empty receives then mean the consumer is
asking a drained group while another holds its backlog), and must drain at half or
more of the rate without the failover. FIFO drains must keep each message group's
acknowledged order.

The rates are CPU-bound (a drain keeps both cores of the machine busy), and the machine
is shared: the same drain repeated minute after minute moved by up to 20 % here, and a
busy minute halved it. So the drain after the failover is judged against the normal
drain measured just before the failover and, only when it falls short of that one,
against the same drain measured again just after (on the healed cluster): a stall (the
issue's drained 18 times slower) falls short of both, a busy minute of one. Half, not
0.8x: a fresh run of the whole suite measured the FIFO drain at 168/s before the
failover, 122/s after the heal and 82/s after the failover, that one with no empty
receive and no stall — three drains a minute apart moved by more than a fifth, so 0.8x
failed on noise; half still fails any drain twice as slow, and the issue's was 18 times."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import yaml

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.e2e.drain import Drain, drain_node, drain_python, node_available

from .conftest import Cluster, Workload, running

# Rates after and without a failover are compared: no neighbour test may skew one.
pytestmark = [pytest.mark.slow, pytest.mark.alone]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
BEFORE_KILL_S = 3.0  # the scenario: 8 s, then 25 s; shorter, the same shape
AFTER_KILL_S = 8.0
STALL_LIMIT = 4  # empty receives in a row while a master reports lag
MIN_RATE_RATIO = 0.5
# Each drain reads a topic of its own with a consumer group of its own, so it drains
# exactly the backlog its round of sends left (a new group starts at the first message).
ROUNDS = {
    "py": False,  # prefix: FIFO?
    "py-fifo": True,
    "node": False,
}


# A round's phase: the normal drain before the failover, the drain after it, and the
# normal drain again once the cluster is healed (only for a client that needs it).
PHASES = ("base", "failover", "rebase")


def _names(prefix: str, phase: str) -> str:
    return f"{prefix}-{phase}"


def _cluster() -> RocketCluster:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["metadata"]["name"] = "drain"
    for prefix, fifo in ROUNDS.items():
        for phase in PHASES:
            name = _names(prefix, phase)
            spec["spec"]["consumerGroups"].append({"name": name, "fifo": fifo})
            kind = "FIFO" if fifo else "NORMAL"
            spec["spec"]["topics"].append({"name": name, "queues": 4, "messageType": kind})
    return RocketCluster.model_validate(spec)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("drain"), _cluster()) as handle:
        yield handle


def _lag(cluster: Cluster, group: str) -> Callable[[], int]:
    """What every group's master reports the consumer group has not acknowledged."""

    def probe() -> int:
        total = 0
        for bgroup in cluster.state["groupEndpoints"]:
            view = Cluster(cluster.runtime, cluster.state, group=bgroup)
            master = view.master()
            rows = view.admin_get(
                master["addresses"]["admin"], f"/v1/groups/{quote(group, safe='')}/offsets"
            )
            total += sum(int(r["lag"]) for r in rows)
        return total

    return probe


@dataclass
class Produced:
    acked: set[str]
    fifo_order: dict[str, tuple[str, int]]
    victim: str | None
    queues: dict[str, str]  # message id -> the queue that acknowledged it


def _produce(cluster: Cluster, phase: str, prefixes: list[str]) -> dict[str, Produced]:
    """Send to the ``phase`` topic of every prefix at once with the official Producer
    (one each); in the failover phase, SIGKILL the first group's master after
    BEFORE_KILL_S. Every send is acknowledged or counted as failed."""
    kill = phase == "failover"
    workloads = {
        prefix: Workload(
            cluster.endpoints,
            topic=_names(prefix, phase),
            message_groups=8 if ROUNDS[prefix] else 0,
        )
        for prefix in prefixes
    }
    for workload in workloads.values():
        workload.start(producers=1)
    victim = None
    try:
        time.sleep(BEFORE_KILL_S)
        if kill:
            victim = cluster.master()["name"]
            cluster.runtime.kill(victim)
        time.sleep(AFTER_KILL_S)
    finally:
        for workload in workloads.values():
            workload.stop()
    for prefix, workload in workloads.items():
        assert workload.acked, f"{prefix}: nothing was acknowledged: {workload.errors}"
    return {
        prefix: Produced(set(w.acked), dict(w.fifo_order), victim, dict(w.queues))
        for prefix, w in workloads.items()
    }


def _check(drain: Drain, produced: Produced, what: str) -> None:
    missing = produced.acked - drain.seen
    assert not missing, (
        f"{what}: {len(missing)} acknowledged messages never consumed; {drain.describe()}"
    )
    assert drain.stalled_run < STALL_LIMIT, (
        f"{what}: {drain.stalled_run} empty receives in a row while a master reported lag; "
        f"{drain.describe()}; receives (at, messages, lag): "
        f"{[(round(r.at, 1), len(r.ids), r.lag) for r in drain.receives]}"
    )


def _check_fifo(drain: Drain, produced: Produced, phase: str) -> None:
    """Per message group of ``produced``, the first deliveries come in the
    acknowledged order."""
    places: dict[str, list[int]] = {}
    for message_id in drain.order:
        if message_id in produced.fifo_order:
            mgroup, place = produced.fifo_order[message_id]
            places.setdefault(mgroup, []).append(place)
    broken = {g: p for g, p in places.items() if p != sorted(p)}
    queues: dict[str, list[tuple[str, int, int]]] = {}  # message group -> (queue, first, last)
    for message_id, (mgroup, place) in sorted(produced.fifo_order.items(), key=lambda i: i[1]):
        queue = produced.queues.get(message_id, "?")
        spans = queues.setdefault(mgroup, [])
        if spans and spans[-1][0] == queue:
            spans[-1] = (queue, spans[-1][1], place)
        else:
            spans.append((queue, place, place))
    assert not broken, (
        f"{phase}: FIFO order broken in {sorted(broken)} (victim {produced.victim}): "
        f"{ {g: _runs(p) for g, p in broken.items()} }; the queues each group's sends "
        f"went to (queue, first place, last place): { {g: queues[g] for g in broken} }"
    )


def _runs(places: list[int]) -> list[tuple[int, int]]:
    """``places`` as runs of consecutive numbers: [0, 1, 2, 7, 8] -> [(0, 2), (7, 8)]."""
    runs: list[tuple[int, int]] = []
    for place in places:
        if runs and place == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], place)
        else:
            runs.append((place, place))
    return runs


Drainer = Callable[[Cluster, str, str, set[str]], Drain]


def _python(cluster: Cluster, group: str, topic: str, expected: set[str]) -> Drain:
    return drain_python(cluster.endpoints, group, topic, expected, _lag(cluster, group))


def _node(cluster: Cluster, group: str, topic: str, expected: set[str]) -> Drain:
    # The Node.js client takes one access point and finds the other group by its routes.
    first = cluster.endpoints.split(";")[0]
    return drain_node(first, group, topic, expected, _lag(cluster, group))


@dataclass
class Round:
    """One client's drains: without the failover, after it, and (when the first
    comparison fell short) without it again after the heal."""

    base: tuple[Drain, Produced]
    after: tuple[Drain, Produced]
    rebase: tuple[Drain, Produced] | None = None

    def short_of(self, reference: Drain) -> bool:
        return self.after[0].rate < MIN_RATE_RATIO * reference.rate


def _drain_all(cluster: Cluster, phase: str, produced: dict[str, Produced]) -> dict[str, Drain]:
    """Every produced prefix's drain, one after the other in the same order each time,
    each alone on the cluster as in the issue's scenario (drains side by side slowed
    each other unevenly: their ratios moved by 20 %)."""
    drainers: dict[str, Drainer] = {"py": _python, "py-fifo": _python, "node": _node}
    return {
        prefix: drainers[prefix](cluster, name, name, produced[prefix].acked)
        for prefix in produced
        for name in [_names(prefix, phase)]
    }


def _phase(cluster: Cluster, phase: str, prefixes: list[str]) -> dict[str, tuple[Drain, Produced]]:
    produced = _produce(cluster, phase, prefixes)
    drains = _drain_all(cluster, phase, produced)
    return {prefix: (drains[prefix], produced[prefix]) for prefix in prefixes}


@pytest.fixture(scope="module")
def rounds(cluster: Cluster) -> dict[str, Round]:
    """The drains without a failover, then the same after one; the three producers
    send side by side (one failover for all three), the drains follow one by one.
    Without Node.js its round is left out: its test fails saying why."""
    prefixes = [p for p in ROUNDS if p != "node" or node_available() is None]
    base = _phase(cluster, "base", prefixes)
    try:
        after = _phase(cluster, "failover", prefixes)
    finally:
        cluster.heal()  # the killed master back as a slave
    done = {prefix: Round(base[prefix], after[prefix]) for prefix in prefixes}
    short = [prefix for prefix, r in done.items() if r.short_of(r.base[0])]
    if short:
        for prefix, again in _phase(cluster, "rebase", short).items():
            done[prefix].rebase = again
    return done


def _judge(cluster: Cluster, rounds: dict[str, Round], prefix: str) -> Round:
    """Every drain of ``prefix`` checked, and the rate after the failover against the
    rate without it (measured before, and when that falls short, after)."""
    done = rounds[prefix]
    normal = [("without a failover", done.base)]
    if done.rebase is not None:
        normal.append(("without a failover, again after the heal", done.rebase))
    for what, (drain, produced) in [*normal, ("after the failover", done.after)]:
        _check(drain, produced, f"{prefix} {what}")
        print(f"\n{prefix} {what}: {drain.describe()}")
    rates = ", ".join(f"{d.rate:.0f}/s {what}" for what, (d, _) in normal)
    assert not all(done.short_of(d) for _, (d, _) in normal), (
        f"{prefix}: drained at {done.after[0].rate:.0f}/s after the failover, less than "
        f"{MIN_RATE_RATIO}x of each normal drain: {rates}"
    )
    _only_masters_export_lag(cluster)
    return done


def _only_masters_export_lag(cluster: Cluster) -> None:
    """A slave holds a replica of the consumption state; exporting it too would count
    every message once per replica in a dashboard's sum."""
    exporters = set()
    running = {p["name"] for p in cluster.runtime.running()}
    for proc in cluster.state["processes"]:
        if proc["role"] != "broker" or proc["name"] not in running:
            continue
        text = httpx.get(cluster.admin_url(proc["addresses"]["admin"], "/metrics"), timeout=5).text
        if "\nrocketmq_consumer_lag_messages{" in text:
            exporters.add(proc["name"])
    masters = {
        Cluster(cluster.runtime, cluster.state, group=g).master()["name"]
        for g in cluster.state["groupEndpoints"]
    }
    assert exporters == masters, f"lag exported by {sorted(exporters)}, masters {sorted(masters)}"


def test_python_consumer_drains_after_a_master_failover(
    cluster: Cluster, rounds: dict[str, Round]
) -> None:
    _judge(cluster, rounds, "py")


def test_python_fifo_consumer_drains_in_order_after_a_master_failover(
    cluster: Cluster, rounds: dict[str, Round]
) -> None:
    done = _judge(cluster, rounds, "py-fifo")
    phases = zip(PHASES, (done.base, done.after, done.rebase), strict=True)
    for phase, (drain, produced) in ((p, r) for p, r in phases if r is not None):
        _check_fifo(drain, produced, phase)


def test_node_consumer_drains_after_a_master_failover(
    cluster: Cluster, rounds: dict[str, Round]
) -> None:
    problem = node_available()
    if problem:
        pytest.fail(problem)
    _judge(cluster, rounds, "node")
