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
asking a drained group while another holds its backlog), and must drain at 0.8x or
more of the rate without the failover. FIFO drains must keep each message group's
acknowledged order."""

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
MIN_RATE_RATIO = 0.8
# Each drain reads a topic of its own with a consumer group of its own, so it drains
# exactly the backlog its round of sends left (a new group starts at the first message).
ROUNDS = {
    "py": False,  # prefix: FIFO?
    "py-fifo": True,
    "node": False,
}


def _names(prefix: str, failover: bool) -> str:
    return f"{prefix}-{'failover' if failover else 'base'}"


def _cluster() -> RocketCluster:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["metadata"]["name"] = "drain"
    for prefix, fifo in ROUNDS.items():
        for failover in (False, True):
            name = _names(prefix, failover)
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


def _produce(cluster: Cluster, *, kill: bool) -> dict[str, Produced]:
    """Send to every round's topic at once with the official Producer (one each);
    with ``kill``, SIGKILL the first group's master after BEFORE_KILL_S. Every send is
    acknowledged or counted as failed."""
    workloads = {
        prefix: Workload(
            cluster.endpoints, topic=_names(prefix, kill), message_groups=8 if fifo else 0
        )
        for prefix, fifo in ROUNDS.items()
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
        prefix: Produced(set(w.acked), dict(w.fifo_order), victim)
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


def _check_fifo(drain: Drain, produced: Produced) -> None:
    """Per message group of ``produced``, the first deliveries come in the
    acknowledged order."""
    places: dict[str, list[int]] = {}
    for message_id in drain.order:
        if message_id in produced.fifo_order:
            mgroup, place = produced.fifo_order[message_id]
            places.setdefault(mgroup, []).append(place)
    broken = {g: p for g, p in places.items() if p != sorted(p)}
    assert not broken, f"FIFO order broken in {sorted(broken)}: {broken}"


Drainer = Callable[[Cluster, str, str, set[str]], Drain]


def _python(cluster: Cluster, group: str, topic: str, expected: set[str]) -> Drain:
    return drain_python(cluster.endpoints, group, topic, expected, _lag(cluster, group))


def _node(cluster: Cluster, group: str, topic: str, expected: set[str]) -> Drain:
    # The Node.js client takes one access point and finds the other group by its routes.
    first = cluster.endpoints.split(";")[0]
    return drain_node(first, group, topic, expected, _lag(cluster, group))


@dataclass
class Round:
    """One client's two drains: without the failover, and after it."""

    base: Drain
    after: Drain
    base_produced: Produced
    produced: Produced


def _drain_all(cluster: Cluster, failover: bool, produced: dict[str, Produced]) -> dict[str, Drain]:
    """Every round's drain, one after the other in the same order each time, each
    alone on the cluster as in the issue's scenario (drains side by side slowed each
    other unevenly: their ratios moved by 20 %). Without Node.js its round is left out:
    its test fails saying why."""
    drainers: dict[str, Drainer] = {"py": _python, "py-fifo": _python, "node": _node}
    if node_available():
        del drainers["node"]
    return {
        prefix: drainer(cluster, name, name, produced[prefix].acked)
        for prefix, drainer in drainers.items()
        for name in [_names(prefix, failover)]
    }


@pytest.fixture(scope="module")
def rounds(cluster: Cluster) -> dict[str, Round]:
    """The drains without a failover, then the same after one. The three producers
    send side by side (one failover for all three), the drains follow one by one."""
    base_produced = _produce(cluster, kill=False)
    base = _drain_all(cluster, False, base_produced)
    produced = _produce(cluster, kill=True)
    try:
        after = _drain_all(cluster, True, produced)
    finally:
        cluster.heal()  # the killed master back as a slave
    return {
        prefix: Round(base[prefix], after[prefix], base_produced[prefix], produced[prefix])
        for prefix in base
    }


def _judge(cluster: Cluster, rounds: dict[str, Round], prefix: str) -> Round:
    """Both drains of ``prefix`` checked, and the second's rate against the first's."""
    done = rounds[prefix]
    _check(done.base, done.base_produced, f"{prefix} without a failover")
    _check(done.after, done.produced, f"{prefix} after the failover")
    print(
        f"\n{prefix}: without a failover {done.base.describe()}"
        f"\n{prefix}: after it {done.after.describe()}"
    )
    assert done.after.rate >= MIN_RATE_RATIO * done.base.rate, (
        f"{prefix}: drained at {done.after.rate:.0f}/s after the failover, "
        f"{done.base.rate:.0f}/s without"
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
    _check_fifo(done.base, done.base_produced)
    _check_fifo(done.after, done.produced)


def test_node_consumer_drains_after_a_master_failover(
    cluster: Cluster, rounds: dict[str, Round]
) -> None:
    problem = node_available()
    if problem:
        pytest.fail(problem)
    _judge(cluster, rounds, "node")
