"""The emulator authenticates and authorises as an API server does: the RBAC rule
table (wildcards, subresources, resourceNames, RoleBinding→ClusterRole), 401 for
a token nobody issued and 403 with the real server's text, TokenRequest, the
escalation check, the real kubectl as the admin and as a ServiceAccount, and a
realised pod that acts with its own ServiceAccount's token."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rocketcluster.e2e.k8s.chart_identity import install_operator_identity
from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.harness import KubeHarness
from rocketcluster.e2e.kube.rbac import (
    ANONYMOUS_USER,
    Attributes,
    RbacIndex,
    UserInfo,
    bootstrap_objects,
    forbidden_message,
    request_verb,
    service_account_user,
    uncovered,
)

NS = "team"
RBAC = "rbac.authorization.k8s.io"
WAIT_S = 60.0
SA_USER = service_account_user(NS, "app")


# --- the rule table (pure) -----------------------------------------------------------


def _rule(
    verbs: list[str],
    resources: list[str],
    groups: list[str] | None = None,
    names: list[str] | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": groups or [""], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _role(kind: str, name: str, rules: list[dict[str, Any]], ns: str = NS) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns} if kind == "Role" else {"name": name}
    return {"kind": kind, "metadata": meta, "rules": rules}


def _binding(
    kind: str, name: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]], ns: str = NS
) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns} if kind == "RoleBinding" else {"name": name}
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": ref_kind, "name": ref},
        "subjects": subjects,
    }


def _sa(name: str = "app", ns: str | None = NS) -> dict[str, Any]:
    subject = {"kind": "ServiceAccount", "name": name}
    if ns:
        subject["namespace"] = ns
    return subject


def _index(rules: list[dict[str, Any]], *, cluster_role: bool = False) -> RbacIndex:
    """``SA_USER`` bound in NS to a Role (or, through a RoleBinding, a ClusterRole)."""
    if cluster_role:
        return RbacIndex.build(
            [],
            [_role("ClusterRole", "r", rules)],
            [_binding("RoleBinding", "b", "ClusterRole", "r", [_sa(ns=None)])],
            [],
        )
    return RbacIndex.build(
        [_role("Role", "r", rules)],
        [],
        [_binding("RoleBinding", "b", "Role", "r", [_sa(ns=None)])],
        [],
    )


def _ask(
    verb: str,
    resource: str,
    *,
    group: str = "",
    sub: str = "",
    name: str = "",
    ns: str = NS,
) -> Attributes:
    return Attributes(
        SA_USER, verb, api_group=group, resource=resource, subresource=sub, name=name, namespace=ns
    )


TABLE = [
    # (rules, request, allowed)
    ([_rule(["get"], ["pods"])], _ask("get", "pods", name="x"), True),
    ([_rule(["get"], ["pods"])], _ask("list", "pods"), False),
    ([_rule(["get"], ["pods"])], _ask("get", "pods", name="x", ns="other"), False),
    ([_rule(["get"], ["pods"])], _ask("get", "pods", group="apps", name="x"), False),
    ([_rule(["*"], ["pods"])], _ask("deletecollection", "pods"), True),
    ([_rule(["get"], ["*"])], _ask("get", "secrets", name="s"), True),
    (
        [_rule(["get"], ["*"], groups=["*"])],
        _ask("get", "deployments", group="apps", name="d"),
        True,
    ),
    # "*" covers subresources; "*/scale" any resource's scale; "pods/*" is literal
    ([_rule(["get"], ["*"])], _ask("get", "pods", sub="log", name="x"), True),
    (
        [_rule(["patch"], ["*/scale"], groups=["apps"])],
        _ask("patch", "statefulsets", group="apps", sub="scale", name="s"),
        True,
    ),
    (
        [_rule(["patch"], ["*/scale"], groups=["apps"])],
        _ask("patch", "statefulsets", group="apps", name="s"),
        False,
    ),
    ([_rule(["get"], ["pods/*"])], _ask("get", "pods", sub="log", name="x"), False),
    ([_rule(["get"], ["pods"])], _ask("get", "pods", sub="log", name="x"), False),
    ([_rule(["get"], ["pods/log"])], _ask("get", "pods", sub="log", name="x"), True),
    ([_rule(["get"], ["pods/log"])], _ask("get", "pods", name="x"), False),
    (
        [_rule(["create"], ["pods/eviction"])],
        _ask("create", "pods", sub="eviction", name="x"),
        True,
    ),
    ([_rule(["patch"], ["pods/status"])], _ask("patch", "pods", sub="status", name="x"), True),
    (
        [_rule(["create"], ["serviceaccounts/token"])],
        _ask("create", "serviceaccounts", sub="token", name="a"),
        True,
    ),
    # resourceNames: only requests that name the object
    ([_rule(["get", "patch"], ["pods"], names=["a"])], _ask("patch", "pods", name="a"), True),
    ([_rule(["get", "patch"], ["pods"], names=["a"])], _ask("patch", "pods", name="b"), False),
    ([_rule(["list"], ["pods"], names=["a"])], _ask("list", "pods"), False),
    ([_rule(["list"], ["pods"], names=["a"])], _ask("list", "pods", name="a"), True),
    ([_rule(["create"], ["pods"], names=["a"])], _ask("create", "pods"), False),
]


@pytest.mark.parametrize(("rules", "request_", "allowed"), TABLE)
def test_the_rule_table(rules: list[dict[str, Any]], request_: Attributes, allowed: bool) -> None:
    assert _index(rules).authorize(request_) is allowed
    # the same rules in a ClusterRole bound by a RoleBinding grant the same, in NS only
    via_cluster_role = _index(rules, cluster_role=True)
    assert via_cluster_role.authorize(request_) is allowed


def test_bindings_subjects_and_scopes() -> None:
    pods = _rule(["list"], ["pods"])
    index = RbacIndex.build(
        [_role("Role", "in-team", [pods])],
        [_role("ClusterRole", "reader", [pods]), _role("ClusterRole", "nodes", [])],
        [
            _binding("RoleBinding", "b1", "ClusterRole", "reader", [_sa("a", None)], ns="ns1"),
            _binding("RoleBinding", "b2", "Role", "in-team", [{"kind": "User", "name": "jo"}]),
            _binding("RoleBinding", "b3", "Role", "missing", [{"kind": "User", "name": "jo"}]),
        ],
        [_binding("ClusterRoleBinding", "c", "ClusterRole", "reader", [_sa("b", "ns2")])],
    )
    a, b = service_account_user("ns1", "a"), service_account_user("ns2", "b")
    assert index.authorize(Attributes(a, "list", resource="pods", namespace="ns1"))
    assert not index.authorize(Attributes(a, "list", resource="pods", namespace="ns2"))
    assert not index.authorize(Attributes(a, "list", resource="pods"))  # all namespaces
    assert index.authorize(Attributes(b, "list", resource="pods"))  # cluster-wide
    assert index.authorize(Attributes(b, "list", resource="pods", namespace="any"))
    jo = UserInfo("jo", ("system:authenticated",))
    assert index.authorize(Attributes(jo, "list", resource="pods", namespace=NS))
    assert not index.authorize(Attributes(jo, "list", resource="pods", namespace="ns1"))
    masters = UserInfo("root", ("system:masters",))
    assert index.authorize(Attributes(masters, "delete", resource="nodes", name="n"))


def test_bootstrap_policy_and_non_resource_urls() -> None:
    objects: dict[str, list[dict[str, Any]]] = {"clusterroles": [], "clusterrolebindings": []}
    for obj in bootstrap_objects():
        objects[obj["kind"].lower() + "s"].append(obj)
    index = RbacIndex.from_objects(objects)
    user = UserInfo("u", ("system:authenticated",))
    for path, allowed in [("/api", True), ("/apis/apps/v1", True), ("/version", True)]:
        assert index.authorize(Attributes(user, "get", path=path)) is allowed
    assert not index.authorize(Attributes(user, "get", path="/metrics"))
    assert not index.authorize(Attributes(user, "post", path="/api"))
    assert index.authorize(Attributes(ANONYMOUS_USER, "get", path="/healthz"))
    assert not index.authorize(Attributes(ANONYMOUS_USER, "get", path="/api"))
    admin = UserInfo("a", ("system:masters",))
    assert index.rules_for(admin)  # cluster-admin, bound to system:masters


def test_request_verbs_and_the_403_text() -> None:
    assert request_verb("GET", name=None) == "list"
    assert request_verb("GET", name="x") == "get"
    assert request_verb("GET", name=None, watch=True) == "watch"
    assert request_verb("POST", name=None) == "create"
    assert request_verb("PUT", name="x") == "update"
    assert request_verb("PATCH", name="x") == "patch"
    assert request_verb("DELETE", name="x") == "delete"
    assert request_verb("DELETE", name=None) == "deletecollection"
    assert forbidden_message(_ask("delete", "pods", name="x")) == (
        'pods "x" is forbidden: User "system:serviceaccount:team:app" cannot delete '
        'resource "pods" in API group "" in the namespace "team"'
    )
    assert forbidden_message(_ask("list", "deployments", group="apps", ns="")) == (
        'deployments.apps is forbidden: User "system:serviceaccount:team:app" cannot list '
        'resource "deployments" in API group "apps" at the cluster scope'
    )
    assert forbidden_message(_ask("create", "pods", sub="eviction", name="p")) == (
        'pods "p" is forbidden: User "system:serviceaccount:team:app" cannot create '
        'resource "pods/eviction" in API group "" in the namespace "team"'
    )
    assert forbidden_message(Attributes(ANONYMOUS_USER, "get", path="/metrics")) == (
        'forbidden: User "system:anonymous" cannot get path "/metrics"'
    )


def test_escalation_covers() -> None:
    held = [
        _rule(["get", "list"], ["pods", "*/scale"]),
        {"nonResourceURLs": ["/x/*"], "verbs": ["get"]},
    ]
    assert uncovered(held, [_rule(["get"], ["pods"])]) == []
    assert uncovered(held, [_rule(["get"], ["pods"], names=["a"])]) == []
    assert uncovered(held, [_rule(["get"], ["statefulsets/scale"])]) == []
    assert uncovered(held, [{"nonResourceURLs": ["/x/y"], "verbs": ["get"]}]) == []
    missing = uncovered(held, [_rule(["get", "delete"], ["pods", "secrets"])])
    assert missing == [
        {"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]},
        {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]},
        {"verbs": ["delete"], "apiGroups": [""], "resources": ["secrets"]},
    ]
    # a wildcard asked for is covered only by a wildcard held
    assert uncovered(held, [_rule(["get"], ["*"])]) != []
    named = [_rule(["get"], ["pods"], names=["a"])]
    assert uncovered(named, [_rule(["get"], ["pods"])]) != []


# --- the emulator, enforcing ---------------------------------------------------------


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[KubeHarness]:
    with KubeHarness(tmp_path_factory.mktemp("rbac"), authorization_mode="RBAC") as harness:
        for ns in (NS, "other"):
            harness.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        yield harness


def _as(kube: KubeHarness, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.Client(base_url=kube.api_url, headers=headers, timeout=30.0, trust_env=False)


def _apply(kube: KubeHarness, text: str) -> None:
    kube.kubectl("apply", "-f", "-", input=textwrap.dedent(text))


def _account(kube: KubeHarness, name: str, ns: str = NS) -> str:
    """A new ServiceAccount (kubectl's typed ``create`` sends protobuf, which the
    emulator does not read: objects are made through the API in JSON) and a token."""
    kube.create({"kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    return kube.service_account_token(ns, name)


def test_401_for_unknown_tokens_403_for_the_anonymous(kube: KubeHarness) -> None:
    with _as(kube, "nobody-issued-this") as http:
        answer = http.get("/api/v1/namespaces/team/pods")
        assert answer.status_code == 401
        assert answer.json()["reason"] == "Unauthorized"
        assert http.get("/healthz").status_code == 401
    with _as(kube, None) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/version").status_code == 200
        answer = http.get("/api/v1/namespaces/team/pods")
        assert answer.status_code == 403
        assert answer.json()["message"] == (
            'pods is forbidden: User "system:anonymous" cannot list resource "pods" '
            'in API group "" in the namespace "team"'
        )
        assert http.get("/api").status_code == 403


def test_token_request_and_the_403_a_service_account_gets(kube: KubeHarness) -> None:
    token = _account(kube, "app")
    kube.create({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}})
    with _as(kube, token) as http:
        assert http.get("/api").status_code == 200  # system:discovery
        answer = http.delete("/api/v1/namespaces/team/configmaps/c")
        assert answer.status_code == 403
        status = answer.json()
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            'configmaps "c" is forbidden: User "system:serviceaccount:team:app" cannot '
            'delete resource "configmaps" in API group "" in the namespace "team"'
        )
        assert status["details"] == {"name": "c", "group": "", "kind": "configmaps"}
        # a TokenRequest for an account that does not exist: 404 (as the admin)
        missing = kube.http.post(
            "/api/v1/namespaces/team/serviceaccounts/nobody/token", json={"spec": {}}
        )
        assert missing.status_code == 404
    report = kube.forbidden_report()
    assert any(
        r["user"] == SA_USER.name and r["verb"] == "delete" and r["name"] == "c" for r in report
    )
    # every namespace has its default account, and its name as a label
    assert kube.get("serviceaccounts", NS, "default") is not None
    labels = (kube.get("namespaces", None, NS) or {})["metadata"]["labels"]
    assert labels["kubernetes.io/metadata.name"] == NS
    # a token dies with its account
    other = _account(kube, "short-lived")
    kube.delete("serviceaccounts", NS, "short-lived")
    with _as(kube, other) as http:
        assert http.get("/api").status_code == 401


def test_roles_bindings_names_and_subresources_as_enforced(kube: KubeHarness) -> None:
    token = _account(kube, "reader")
    _apply(
        kube,
        """\
        apiVersion: rbac.authorization.k8s.io/v1
        kind: ClusterRole
        metadata: {name: pod-reader}
        rules:
        - {apiGroups: [""], resources: [pods, pods/log], verbs: [get, list, watch]}
        - apiGroups: [""]
          resources: [configmaps]
          resourceNames: [mine]
          verbs: [get, list, patch]
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {name: reader, namespace: team}
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
        subjects: [{kind: ServiceAccount, name: reader}]
        """,
    )
    for name in ("mine", "theirs"):
        kube.create({"kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}})
    with _as(kube, token) as http:
        assert http.get("/api/v1/namespaces/team/pods").status_code == 200
        assert http.get("/api/v1/namespaces/other/pods").status_code == 403  # bound in team
        assert http.get("/api/v1/pods").status_code == 403  # all namespaces
        assert http.get("/api/v1/namespaces/team/configmaps/mine").status_code == 200
        assert http.get("/api/v1/namespaces/team/configmaps/theirs").status_code == 403
        assert http.get("/api/v1/namespaces/team/configmaps").status_code == 403
        by_name = {"fieldSelector": "metadata.name=mine"}
        listed = http.get("/api/v1/namespaces/team/configmaps", params=by_name)
        assert listed.status_code == 200
        assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["mine"]
        patch = {"Content-Type": "application/merge-patch+json"}
        mine = http.patch(
            "/api/v1/namespaces/team/configmaps/mine", content='{"data":{"a":"b"}}', headers=patch
        )
        assert mine.status_code == 200
        # a change of the rules is enforced at once (the index is rebuilt)
        kube.delete("rolebindings", NS, "reader")
        assert http.get("/api/v1/namespaces/team/pods").status_code == 403


def test_the_escalation_check(kube: KubeHarness) -> None:
    token = _account(kube, "admin-ish")
    _apply(
        kube,
        """\
        apiVersion: rbac.authorization.k8s.io/v1
        kind: Role
        metadata: {name: role-writer, namespace: team}
        rules:
        - apiGroups: [rbac.authorization.k8s.io]
          resources: [roles, rolebindings]
          verbs: [create, patch, get]
        - {apiGroups: [""], resources: [configmaps], verbs: [get]}
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {name: role-writer, namespace: team}
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-writer}
        subjects: [{kind: ServiceAccount, name: admin-ish}]
        """,
    )
    roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles"
    bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings"
    held = {"kind": "Role", "metadata": {"name": "held"}, "rules": [_rule(["get"], ["configmaps"])]}
    more = {"kind": "Role", "metadata": {"name": "more"}, "rules": [_rule(["delete"], ["pods"])]}
    with _as(kube, token) as http:
        assert http.post(roles, json=held).status_code == 201
        refused = http.post(roles, json=more)
        assert refused.status_code == 403
        assert refused.json()["message"] == (
            'roles.rbac.authorization.k8s.io "more" is forbidden: user '
            '"system:serviceaccount:team:admin-ish" (groups=["system:serviceaccounts" '
            '"system:serviceaccounts:team" "system:authenticated"]) is attempting to grant '
            "RBAC permissions not currently held:\n"
            '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}'
        )
        # a patch that would add a rule not held is refused too
        grow = {"rules": [_rule(["get"], ["configmaps"]), _rule(["list"], ["secrets"])]}
        answer = http.patch(
            f"{roles}/held",
            content=json.dumps(grow),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert answer.status_code == 403
        # binding a role whose rules it does not hold: refused; its own: allowed
        bind_admin = {
            "kind": "RoleBinding",
            "metadata": {"name": "to-admin"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [_sa("admin-ish")],
        }
        assert http.post(bindings, json=bind_admin).status_code == 403
        bind_held = {**bind_admin, "metadata": {"name": "to-held"}}
        bind_held["roleRef"] = {"apiGroup": RBAC, "kind": "Role", "name": "held"}
        assert http.post(bindings, json=bind_held).status_code == 201
        # with `escalate` on roles and `bind` on cluster-admin, both pass
        _apply(
            kube,
            """\
            apiVersion: rbac.authorization.k8s.io/v1
            kind: Role
            metadata: {name: escalator, namespace: team}
            rules:
            - {apiGroups: [rbac.authorization.k8s.io], resources: [roles], verbs: [escalate]}
            - {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind],
               resourceNames: [cluster-admin]}
            ---
            apiVersion: rbac.authorization.k8s.io/v1
            kind: RoleBinding
            metadata: {name: escalator, namespace: team}
            roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: escalator}
            subjects: [{kind: ServiceAccount, name: admin-ish}]
            """,
        )
        assert http.post(roles, json=more).status_code == 201
        assert http.post(bindings, json=bind_admin).status_code == 201


def test_kubectl_as_admin_and_as_a_service_account(kube: KubeHarness, tmp_path: Path) -> None:
    _account(kube, "cli")
    kube.create({"kind": "ConfigMap", "metadata": {"name": "cli-cm", "namespace": NS}})
    assert "cli-cm" in kube.kubectl("get", "configmaps", "-n", NS).stdout
    config = kube.service_account_kubeconfig(NS, "cli", tmp_path / "kubeconfig")
    refused = kube.kubectl(
        "--kubeconfig", str(config), "delete", "configmap", "cli-cm", check=False
    )
    assert refused.returncode != 0
    assert (
        'Error from server (Forbidden): configmaps "cli-cm" is forbidden: User '
        '"system:serviceaccount:team:cli" cannot delete resource "configmaps" in API group "" '
        'in the namespace "team"'
    ) in refused.stderr
    _apply(
        kube,
        """\
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {name: cli-admin, namespace: team}
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
        subjects: [{kind: ServiceAccount, name: cli, namespace: team}]
        """,
    )
    kube.kubectl("--kubeconfig", str(config), "delete", "configmap", "cli-cm")
    assert kube.get("configmaps", NS, "cli-cm") is None


def test_a_pod_acts_with_its_own_service_accounts_token(kube: KubeHarness) -> None:
    """The realiser mints the pod's token (TokenRequest): the pod's process reads it
    from its service-account directory and is that account to the API server. A pod
    whose account is missing waits with kubelet's FailedMount."""
    program = textwrap.dedent("""\
        import os, pathlib, time, urllib.error, urllib.request
        base = os.environ["ROCKETCLUSTER_KUBE_API_URL"]
        sa = pathlib.Path(os.environ["ROCKETCLUSTER_SERVICEACCOUNT_DIR"])
        auth = {"Authorization": "Bearer " + (sa / "token").read_text()}
        for path in ("/api/v1/namespaces/team/pods", "/api/v1/namespaces/team/secrets"):
            request = urllib.request.Request(base + path, headers=auth)
            try:
                print(path, urllib.request.urlopen(request).status, flush=True)
            except urllib.error.HTTPError as exc:
                print(path, exc.code, flush=True)
        time.sleep(3600)
        """)
    _account(kube, "runner")
    _apply(
        kube,
        """\
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {name: runner, namespace: team}
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-lister}
        subjects: [{kind: ServiceAccount, name: runner}]
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: ClusterRole
        metadata: {name: pod-lister}
        rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
        """,
    )
    for name, account in (("with-sa", "runner"), ("without-sa", "absent")):
        kube.create(
            {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "serviceAccountName": account,
                    "containers": [{"name": "main", "command": ["python3", "-c", program]}],
                },
            }
        )

    def answers() -> str | None:
        text = kube.kubectl("logs", "-n", NS, "with-sa", check=False).stdout
        return text if text.count("\n") >= 2 else None

    text = kube.wait_for(answers, WAIT_S, "the pod's two calls")
    assert "/api/v1/namespaces/team/pods 200" in text
    assert "/api/v1/namespaces/team/secrets 403" in text
    assert any(
        r["user"] == "system:serviceaccount:team:runner" and r["resource"] == "secrets"
        for r in kube.forbidden_report()
    )

    def failed_mount() -> dict[str, Any] | None:
        events = [e for e in kube.events() if e["event"] == "failed-mount"]
        return next((e for e in events if e.get("pod") == "without-sa"), None)

    event = kube.wait_for(failed_mount, WAIT_S, "FailedMount of without-sa")
    assert event["reason"] == "FailedMount"
    assert 'serviceaccounts "absent" not found' in event["message"]
    assert kube.realised_pods() and not any(
        p["name"] == "without-sa" and p["pids"] for p in kube.realised_pods()
    )
    # the account appears: the pod starts
    kube.create({"kind": "ServiceAccount", "metadata": {"name": "absent", "namespace": NS}})

    def started() -> bool | None:
        return any(p["name"] == "without-sa" and p["pids"] for p in kube.realised_pods()) or None

    kube.wait_for(started, WAIT_S, "without-sa to start once its account exists")
    for name in ("with-sa", "without-sa"):
        kube.kubectl("delete", "pod", name, "-n", NS, "--wait=false")


def test_always_allow_still_authenticates(tmp_path: Path, binaries: Binaries) -> None:
    with KubeHarness(tmp_path, realise=False, authorization_mode="AlwaysAllow") as kube:
        with _as(kube, None) as http:
            assert http.get("/api/v1/namespaces/default/pods").status_code == 200
        with _as(kube, "forged") as http:
            assert http.get("/api/v1/namespaces/default/pods").status_code == 401
        assert kube.kubectl("get", "pods").returncode == 0
        assert kube.forbidden_report() == []


def test_the_operators_identity_from_its_chart(kube: KubeHarness) -> None:
    """The chart's ServiceAccount and RBAC, applied as helm renders them: the operator
    may do what it does (list pods everywhere; grant a broker its pod-label Role, which
    passes the escalation check because it holds those verbs) and nothing else."""
    identity = install_operator_identity(kube)
    assert identity.kubeconfig.exists()
    listed = kube.kubectl("--kubeconfig", str(identity.kubeconfig), "get", "pods", "-A")
    assert listed.returncode == 0
    refused = kube.kubectl(
        "--kubeconfig", str(identity.kubeconfig), "delete", "namespace", "other", check=False
    )
    assert f'User "{identity.user}" cannot delete resource "namespaces"' in refused.stderr
    config = yaml.safe_load(identity.kubeconfig.read_text())
    with _as(kube, config["users"][0]["user"]["token"]) as http:
        base = "/apis/rbac.authorization.k8s.io/v1/namespaces/team"
        role = {
            "kind": "Role",
            "metadata": {"name": "broker-pod-label"},
            "rules": [_rule(["get", "patch"], ["pods"], names=["b-0"])],
        }
        assert http.post(f"{base}/roles", json=role).status_code == 201
        binding = {
            "kind": "RoleBinding",
            "metadata": {"name": "broker-pod-label"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "broker-pod-label"},
            "subjects": [_sa("broker")],
        }
        assert http.post(f"{base}/rolebindings", json=binding).status_code == 201
        wider = {**role, "metadata": {"name": "wider"}, "rules": [_rule(["*"], ["secrets"])]}
        assert http.post(f"{base}/roles", json=wider).status_code == 403
