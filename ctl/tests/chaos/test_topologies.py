"""Partitions by topology (pure): who is cut from whom for halves, bridge and the
majorities ring, and the iptables rules that make it so."""

from __future__ import annotations

from rocketcluster.ctl.chaos import netns
from rocketcluster.ctl.chaos.netns import Node


def nodes(n: int) -> list[Node]:
    return [Node(f"n{i}", f"ns{i}", f"10.77.0.{10 + i}", i) for i in range(n)]


def sees(cut: dict[str, set[str]], name: str) -> set[str]:
    return set(cut) - cut[name] - {name}


def test_halves_cut_every_node_from_the_other_half_only() -> None:
    ns = nodes(9)
    cut = netns.grudges(netns.halves(ns))
    first = {f"n{i}" for i in range(5)}
    for name in cut:
        mine = first if name in first else set(cut) - first
        assert cut[name] == set(cut) - mine
    # Symmetric: a cut one way is a cut the other way.
    assert all(a in cut[b] for a in cut for b in cut[a])


def test_a_bridge_node_sees_both_sides_that_do_not_see_each_other() -> None:
    ns = nodes(9)
    cut = netns.grudges(netns.bridge(ns))
    assert cut["n4"] == set()
    assert sees(cut, "n0") == {"n1", "n2", "n3", "n4"}
    assert sees(cut, "n8") == {"n4", "n5", "n6", "n7"}
    assert "n8" in cut["n0"] and "n0" in cut["n8"]


def test_the_ring_gives_each_node_its_own_majority() -> None:
    ns = nodes(9)
    cut = netns.majorities_ring(ns)
    majorities = set()
    for name in cut:
        visible = sees(cut, name) | {name}
        assert len(visible) == 5  # a majority of 9
        majorities.add(frozenset(visible))
    assert len(majorities) == 9  # no two nodes see the same majority
    assert sees(cut, "n0") == {"n7", "n8", "n1", "n2"}
    assert all(a in cut[b] for a in cut for b in cut[a])


def test_rules_drop_both_directions_at_both_ends() -> None:
    ns = nodes(4)
    by_name = {n.name: n for n in ns}
    cut = netns.grudges(netns.halves(ns))
    rules = netns.isolate_from(by_name, cut)
    # n0 and n1 are cut from n2 and n3: an in and an out rule per pair, at each end.
    assert len(rules) == 4 * 2 * 2
    at_n0 = {r.spec for r in rules if r.namespace == "ns0"}
    assert ("-s", "10.77.0.12", "-j", "DROP") in at_n0
    assert ("-d", "10.77.0.13", "-j", "DROP") in at_n0
    assert not any("10.77.0.11" in r.spec for r in rules if r.namespace == "ns0")
