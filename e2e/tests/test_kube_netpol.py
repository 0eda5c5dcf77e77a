"""The realiser's NetworkPolicy engine (:mod:`rocketcluster.e2e.kube.netpol`) against a
table of Kubernetes' rules: which pods are isolated, and which connections to them
are allowed — pod and namespace selectors alone and together, ipBlock with except,
named ports, endPort, empty from, empty ingress, policyTypes, and what is ignored."""

from __future__ import annotations

from typing import Any

import pytest

from rocketcluster.e2e.kube import netpol
from rocketcluster.e2e.kube.netpol import Allow, ruleset, selects


def _pod(ns: str, name: str, ip: str, ports: dict[str, int] | None = None, **labels: str) -> Any:
    return {
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "ports": [{"name": k, "containerPort": v} for k, v in (ports or {}).items()],
                }
            ]
        },
        "status": {"podIP": ip, "phase": "Running"},
    }


PODS = [
    _pod("shop", "web", "10.0.0.1", {"http": 8080}, app="web"),
    _pod("shop", "db", "10.0.0.2", {"sql": 5432}, app="db"),
    _pod("shop", "cache", "10.0.0.3", app="cache"),
    _pod("ops", "prom", "10.0.1.1", app="prom"),
    _pod("ops", "web", "10.0.1.2", app="web"),
    _pod("default", "stranger", "10.0.2.1"),
]
NAMESPACES = [
    {"metadata": {"name": "shop", "labels": {"team": "a"}}},
    {"metadata": {"name": "ops", "labels": {"team": "sre"}}},
    # "default" has no object: it still carries its name label
]
IP = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["status"]["podIP"] for p in PODS}


def _policy(name: str, pod_selector: dict[str, Any], ns: str = "shop", **spec: Any) -> Any:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"podSelector": pod_selector, **spec},
    }


def _allowed(policies: list[Any], src: str, dst: str, port: int) -> bool:
    return ruleset(policies, PODS, NAMESPACES).allows(IP[src], IP[dst], port)


DB_ONLY = {"matchLabels": {"app": "db"}}

# (case, policies, source, destination, port, allowed)
TABLE: list[tuple[str, list[Any], str, str, int, bool]] = [
    ("no policy: open", [], "default/stranger", "shop/db", 5432, True),
    (
        "empty ingress list denies everything",
        [_policy("deny", DB_ONLY, ingress=[])],
        "shop/web",
        "shop/db",
        5432,
        False,
    ),
    (
        "absent ingress is the same",
        [_policy("deny", DB_ONLY, policyTypes=["Ingress"])],
        "shop/web",
        "shop/db",
        5432,
        False,
    ),
    (
        "a pod always reaches itself",
        [_policy("deny", DB_ONLY, ingress=[])],
        "shop/db",
        "shop/db",
        5432,
        True,
    ),
    (
        "an unselected pod stays open",
        [_policy("deny", DB_ONLY, ingress=[])],
        "default/stranger",
        "shop/cache",
        1,
        True,
    ),
    (
        "{} selects every pod of the namespace",
        [_policy("deny", {}, ingress=[])],
        "shop/web",
        "shop/cache",
        1,
        False,
    ),
    (
        "a policy applies in its own namespace only",
        [_policy("deny", {}, ns="ops", ingress=[])],
        "default/stranger",
        "shop/web",
        8080,
        True,
    ),
    (
        "an empty rule allows every source and port",
        [_policy("all", DB_ONLY, ingress=[{}])],
        "default/stranger",
        "shop/db",
        12345,
        True,
    ),
    (
        "podSelector: same namespace, matching pod",
        [
            _policy(
                "p", DB_ONLY, ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]
            )
        ],
        "shop/web",
        "shop/db",
        5432,
        True,
    ),
    (
        "podSelector: a matching pod of another namespace is refused",
        [
            _policy(
                "p", DB_ONLY, ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]
            )
        ],
        "ops/web",
        "shop/db",
        5432,
        False,
    ),
    (
        "namespaceSelector: every pod of the namespace",
        [
            _policy(
                "n",
                DB_ONLY,
                ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "sre"}}}]}],
            )
        ],
        "ops/prom",
        "shop/db",
        5432,
        True,
    ),
    (
        "namespaceSelector by the automatic name label, namespace without object",
        [
            _policy(
                "n",
                DB_ONLY,
                ingress=[
                    {
                        "from": [
                            {"namespaceSelector": {"matchLabels": {netpol.NAME_LABEL: "default"}}}
                        ]
                    }
                ],
            )
        ],
        "default/stranger",
        "shop/db",
        5432,
        True,
    ),
    (
        "both selectors: the pod must match in a matching namespace",
        [
            _policy(
                "b",
                DB_ONLY,
                ingress=[
                    {
                        "from": [
                            {
                                "namespaceSelector": {"matchLabels": {"team": "sre"}},
                                "podSelector": {"matchLabels": {"app": "prom"}},
                            }
                        ]
                    }
                ],
            )
        ],
        "ops/web",
        "shop/db",
        5432,
        False,
    ),
    (
        "both selectors: matching pod",
        [
            _policy(
                "b",
                DB_ONLY,
                ingress=[
                    {
                        "from": [
                            {
                                "namespaceSelector": {"matchLabels": {"team": "sre"}},
                                "podSelector": {"matchLabels": {"app": "prom"}},
                            }
                        ]
                    }
                ],
            )
        ],
        "ops/prom",
        "shop/db",
        5432,
        True,
    ),
    (
        "matchExpressions NotIn",
        [
            _policy(
                "e",
                DB_ONLY,
                ingress=[
                    {
                        "from": [
                            {
                                "namespaceSelector": {},
                                "podSelector": {
                                    "matchExpressions": [
                                        {"key": "app", "operator": "NotIn", "values": ["web"]}
                                    ]
                                },
                            }
                        ]
                    }
                ],
            )
        ],
        "ops/web",
        "shop/db",
        5432,
        False,
    ),
    (
        "ipBlock",
        [_policy("i", DB_ONLY, ingress=[{"from": [{"ipBlock": {"cidr": "10.0.2.0/24"}}]}])],
        "default/stranger",
        "shop/db",
        5432,
        True,
    ),
    (
        "ipBlock except",
        [
            _policy(
                "i",
                DB_ONLY,
                ingress=[
                    {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}}]}
                ],
            )
        ],
        "default/stranger",
        "shop/db",
        5432,
        False,
    ),
    (
        "ipBlock except leaves the rest",
        [
            _policy(
                "i",
                DB_ONLY,
                ingress=[
                    {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}}]}
                ],
            )
        ],
        "ops/prom",
        "shop/db",
        5432,
        True,
    ),
    (
        "a port other than the rule's is refused",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": 5432}]}])],
        "default/stranger",
        "shop/db",
        5433,
        False,
    ),
    (
        "a named port resolves on the destination pod",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": "sql"}]}])],
        "default/stranger",
        "shop/db",
        5432,
        True,
    ),
    (
        "a named port the pod does not have admits nothing",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": "http"}]}])],
        "default/stranger",
        "shop/db",
        8080,
        False,
    ),
    (
        "endPort: inside the range",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": 5000, "endPort": 6000}]}])],
        "default/stranger",
        "shop/db",
        6000,
        True,
    ),
    (
        "endPort: outside the range",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": 5000, "endPort": 6000}]}])],
        "default/stranger",
        "shop/db",
        6001,
        False,
    ),
    (
        "UDP rules allow no TCP",
        [_policy("p", DB_ONLY, ingress=[{"ports": [{"port": 5432, "protocol": "UDP"}]}])],
        "default/stranger",
        "shop/db",
        5432,
        False,
    ),
    (
        "policies add up",
        [
            _policy("deny", DB_ONLY, ingress=[]),
            _policy(
                "p", DB_ONLY, ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]
            ),
        ],
        "shop/web",
        "shop/db",
        5432,
        True,
    ),
    (
        "an egress-only policy isolates nothing for ingress",
        [_policy("e", DB_ONLY, policyTypes=["Egress"], egress=[])],
        "default/stranger",
        "shop/db",
        5432,
        True,
    ),
    (
        "egress beside ingress: ingress still applies",
        [_policy("e", DB_ONLY, egress=[], ingress=[])],
        "default/stranger",
        "shop/db",
        5432,
        False,
    ),
]


@pytest.mark.parametrize(
    ("policies", "src", "dst", "port", "allowed"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_the_engine_follows_kubernetes(
    policies: list[Any], src: str, dst: str, port: int, allowed: bool
) -> None:
    assert _allowed(policies, src, dst, port) is allowed


def test_the_ruleset_lists_isolated_pods_and_exact_tuples() -> None:
    policy = _policy(
        "p",
        DB_ONLY,
        ingress=[
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app": "web"}}},
                    {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}},
                ],
                "ports": [{"port": "sql"}, {"port": 7000, "endPort": 7010}],
            }
        ],
    )
    rules = ruleset([policy], PODS, NAMESPACES)
    assert rules.isolated == {IP["shop/db"]}
    assert rules.names == {IP["shop/db"]: "shop/db"}
    db = IP["shop/db"]
    assert rules.allowed == {
        Allow(f"{IP['shop/web']}/32", db, 5432, 5432),
        Allow(f"{IP['shop/web']}/32", db, 7000, 7010),
        Allow("10.9.0.0/16", db, 5432, 5432, ("10.9.1.0/24",)),
        Allow("10.9.0.0/16", db, 7000, 7010, ("10.9.1.0/24",)),
    }


def test_pods_without_an_address_or_finished_are_neither_sources_nor_targets() -> None:
    done = _pod("shop", "job", "10.0.0.9", app="web")
    done["status"]["phase"] = "Succeeded"
    pending = _pod("shop", "new", "", app="db")
    rules = ruleset(
        [_policy("p", {}, ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}])],
        [*PODS, done, pending],
        NAMESPACES,
    )
    assert "10.0.0.9" not in rules.isolated
    assert not any(a.src == "10.0.0.9/32" for a in rules.allowed)
    assert "" not in rules.isolated


def test_what_is_not_enforced_is_reported_once() -> None:
    policies = [
        _policy("e", DB_ONLY, egress=[], ingress=[{"ports": [{"port": 53, "protocol": "UDP"}]}]),
        _policy("f", DB_ONLY, ingress=[{"ports": [{"port": 53, "protocol": "UDP"}]}]),
    ]
    ignored = ruleset(policies, PODS, NAMESPACES).ignored
    assert ignored == (
        "NetworkPolicy shop/e: egress is not enforced",
        "NetworkPolicy shop/e: protocol UDP is not enforced",
        "NetworkPolicy shop/f: protocol UDP is not enforced",
    )


def test_label_selectors() -> None:
    labels = {"a": "1", "b": "2"}
    assert selects({}, labels)
    assert not selects(None, labels)
    assert selects({"matchLabels": {"a": "1"}}, labels)
    assert not selects({"matchLabels": {"a": "2"}}, labels)
    assert selects(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, labels
    )
    assert selects(
        {"matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["1"]}]}, labels
    )
    assert selects({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}, labels)
    assert selects({"matchExpressions": [{"key": "b", "operator": "Exists"}]}, labels)
    assert not selects(
        {"matchExpressions": [{"key": "b", "operator": "Gt", "values": ["1"]}]}, labels
    )
