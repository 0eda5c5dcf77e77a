"""Kubernetes RBAC as the API server's authorizer evaluates it: pure data in, answers out.

- :class:`Attributes` is one request as the authorizer sees it (user, verb, API group,
  resource, subresource, name, namespace — or a non-resource path);
  :func:`request_verb` maps an HTTP request to its verb.
- :class:`RbacIndex` is built from the stored Roles, ClusterRoles, RoleBindings
  (to a Role or a ClusterRole, granting in the binding's namespace) and
  ClusterRoleBindings: subject → rules, cluster-wide and per namespace. The emulator
  rebuilds it whenever an ``rbac.authorization.k8s.io`` object changes.
- Matching is upstream's (``k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go``):
  ``*`` in verbs, apiGroups and resources (``*`` covers subresources too); ``*/scale``
  matches the ``scale`` subresource of any resource; ``pods/*`` is **not** a wildcard
  (the real authorizer compares it literally, so it grants nothing); ``resourceNames``
  limits a rule to requests that name an object (get, update, patch, delete — list
  and watch only through a ``metadata.name`` field selector; never create);
  ``nonResourceURLs`` match exactly or by a trailing ``*``. ``system:masters``
  bypasses the check, as the API server's privileged-group authorizer does.
- The escalation check (``pkg/registry/rbac/validation``): a Role or ClusterRole may
  be written only by a user who already holds every rule in it, or may ``escalate``;
  a binding only by one who holds the bound role's rules, or may ``bind`` it.
- :func:`bootstrap_objects`: ``cluster-admin`` (bound to ``system:masters``),
  ``system:discovery`` and ``system:public-info-viewer``, as a new cluster has them.
- :func:`granted` and :func:`allows` are the static views the chart tests use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"
ROLE_KINDS = ("roles", "clusterroles")
BINDING_KINDS = ("rolebindings", "clusterrolebindings")

Rule = Mapping[str, Any]


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()

    @property
    def privileged(self) -> bool:
        return MASTERS in self.groups


def service_account_user(namespace: str, name: str) -> UserInfo:
    return UserInfo(
        f"{SA_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True)
class Attributes:
    """One request as the authorizer sees it. A resource request has ``resource``;
    otherwise ``path`` is the non-resource URL."""

    user: UserInfo
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""

    @property
    def resource_request(self) -> bool:
        return bool(self.resource)

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def request_verb(
    method: str, *, name: str | None, watch: bool = False, subresource: str | None = None
) -> str:
    """The RBAC verb of a resource request (``kube-apiserver``'s RequestInfo)."""
    method = method.upper()
    if method in ("GET", "HEAD"):
        if watch:
            return "watch"
        return "get" if name is not None else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return method.lower()


def non_resource_verb(method: str) -> str:
    return method.lower()


# --- matching (upstream evaluation_helpers.go) -------------------------------------


def _verb_matches(rule: Rule, verb: str) -> bool:
    verbs = rule.get("verbs") or []
    return "*" in verbs or verb in verbs


def _group_matches(rule: Rule, group: str) -> bool:
    groups = rule.get("apiGroups") or []
    return "*" in groups or group in groups


def _resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    for resource in rule.get("resources") or []:
        if resource in ("*", combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def _name_matches(rule: Rule, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def _url_matches(rule: Rule, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def rule_allows(rule: Rule, attrs: Attributes) -> bool:
    if attrs.resource_request:
        return (
            _verb_matches(rule, attrs.verb)
            and _group_matches(rule, attrs.api_group)
            and _resource_matches(rule, attrs.combined_resource, attrs.subresource)
            and _name_matches(rule, attrs.name)
        )
    return _verb_matches(rule, attrs.verb) and _url_matches(rule, attrs.path)


# --- who gets which rules ----------------------------------------------------------


def _subject_applies(subject: Mapping[str, Any], user: UserInfo, binding_ns: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_ns
        return user.name == f"{SA_PREFIX}{namespace}:{name}"
    return False


@dataclass
class RbacIndex:
    """Subject → rules. Built from the four kinds of RBAC objects (as stored)."""

    # (binding namespace or "" for cluster-wide, subjects, the bound role's rules)
    grants: list[tuple[str, tuple[Mapping[str, Any], ...], tuple[Rule, ...]]] = field(
        default_factory=list
    )
    # subject key → indices into grants, for a quick lookup per request
    _by_subject: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    _any_sa: list[int] = field(default_factory=list)  # SA subjects: matched by user name

    @classmethod
    def build(
        cls,
        roles: Iterable[Mapping[str, Any]],
        cluster_roles: Iterable[Mapping[str, Any]],
        role_bindings: Iterable[Mapping[str, Any]],
        cluster_role_bindings: Iterable[Mapping[str, Any]],
    ) -> RbacIndex:
        role_rules = {
            (r["metadata"].get("namespace", ""), r["metadata"]["name"]): tuple(r.get("rules") or [])
            for r in roles
        }
        cluster_rules = {r["metadata"]["name"]: tuple(r.get("rules") or []) for r in cluster_roles}
        index = cls()

        def add(namespace: str, binding: Mapping[str, Any], rules: tuple[Rule, ...]) -> None:
            subjects = tuple(binding.get("subjects") or [])
            at = len(index.grants)
            index.grants.append((namespace, subjects, rules))
            for subject in subjects:
                if subject.get("kind") == "ServiceAccount":
                    ns = subject.get("namespace") or namespace
                    key = ("User", f"{SA_PREFIX}{ns}:{subject.get('name', '')}")
                else:
                    key = (str(subject.get("kind")), str(subject.get("name", "")))
                index._by_subject.setdefault(key, []).append(at)

        for binding in cluster_role_bindings:
            ref = binding.get("roleRef") or {}
            if ref.get("kind") == "ClusterRole" and ref.get("name") in cluster_rules:
                add("", binding, cluster_rules[ref["name"]])
        for binding in role_bindings:
            ref = binding.get("roleRef") or {}
            namespace = binding["metadata"].get("namespace", "")
            if ref.get("kind") == "ClusterRole":
                rules = cluster_rules.get(ref.get("name", ""))
            elif ref.get("kind") == "Role":
                rules = role_rules.get((namespace, ref.get("name", "")))
            else:
                rules = None
            if rules is not None:
                add(namespace, binding, rules)
        return index

    @classmethod
    def from_objects(cls, objects: Mapping[str, Iterable[Mapping[str, Any]]]) -> RbacIndex:
        """From ``{"roles": [...], "clusterroles": [...], "rolebindings": [...],
        "clusterrolebindings": [...]}``."""
        return cls.build(
            objects.get("roles", ()),
            objects.get("clusterroles", ()),
            objects.get("rolebindings", ()),
            objects.get("clusterrolebindings", ()),
        )

    def rules_for(self, user: UserInfo, namespace: str = "") -> list[Rule]:
        """Every rule the user holds cluster-wide, plus those bound in ``namespace``."""
        keys = [("User", user.name), *(("Group", g) for g in user.groups)]
        seen: set[int] = set()
        out: list[Rule] = []
        for key in keys:
            for at in self._by_subject.get(key, ()):
                if at in seen:
                    continue
                seen.add(at)
                bound_ns, subjects, rules = self.grants[at]
                if bound_ns and bound_ns != namespace:
                    continue
                if any(_subject_applies(s, user, bound_ns) for s in subjects):
                    out.extend(rules)
        return out

    def authorize(self, attrs: Attributes) -> bool:
        if attrs.user.privileged:
            return True
        return any(rule_allows(r, attrs) for r in self.rules_for(attrs.user, attrs.namespace))


# --- the 403 text --------------------------------------------------------------------


def forbidden_message(attrs: Attributes) -> str:
    """What kube-apiserver says (``responsewriters.forbiddenMessage`` and
    ``apierrors.NewForbidden``) when the authorizer says no."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (
        f'{subject} is forbidden: User "{user}" cannot {attrs.verb} resource '
        f'"{attrs.combined_resource}" in API group "{attrs.api_group}" {scope}'
    )


# --- escalation (upstream policy_compare.go: Covers) ---------------------------------


def _atoms(rule: Rule) -> list[dict[str, Any]]:
    """A rule broken into atoms: one verb, group, resource (and name) each."""
    out: list[dict[str, Any]] = []
    verbs = rule.get("verbs") or []
    for url in rule.get("nonResourceURLs") or []:
        out += [{"verbs": [v], "nonResourceURLs": [url]} for v in verbs]
    names = rule.get("resourceNames") or [None]
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in verbs:
                for name in names:
                    atom: dict[str, Any] = {
                        "verbs": [verb],
                        "apiGroups": [group],
                        "resources": [resource],
                    }
                    if name is not None:
                        atom["resourceNames"] = [name]
                    out.append(atom)
    return out


def _has(values: Sequence[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def _covers(owner: Rule, atom: Mapping[str, Any]) -> bool:
    verb = atom["verbs"][0]
    if not _has(owner.get("verbs") or [], verb):
        return False
    if "nonResourceURLs" in atom:
        url = atom["nonResourceURLs"][0]
        return any(
            u == url or (u.endswith("*") and url.startswith(u[:-1]))
            for u in owner.get("nonResourceURLs") or []
        )
    if not _has(owner.get("apiGroups") or [], atom["apiGroups"][0]):
        return False
    resource = atom["resources"][0]
    owned = owner.get("resources") or []
    if "*" not in owned and resource not in owned:
        _, slash, sub = resource.partition("/")
        if not (slash and f"*/{sub}" in owned):
            return False
    owner_names = owner.get("resourceNames") or []
    if not owner_names:
        return True
    names = atom.get("resourceNames") or []
    return bool(names) and names[0] in owner_names


def uncovered(owned: Iterable[Rule], requested: Iterable[Rule]) -> list[dict[str, Any]]:
    """The parts of ``requested`` that no rule in ``owned`` covers."""
    owned = list(owned)
    return [a for r in requested for a in _atoms(r) if not any(_covers(o, a) for o in owned)]


def escalation_message(
    user: UserInfo, qualified: str, name: str, missing: Sequence[Mapping[str, Any]]
) -> str:
    groups = " ".join(f'"{g}"' for g in user.groups)
    lines = []
    for atom in missing:
        parts = []
        for key, label in (
            ("apiGroups", "APIGroups"),
            ("resources", "Resources"),
            ("resourceNames", "ResourceNames"),
            ("nonResourceURLs", "NonResourceURLs"),
            ("verbs", "Verbs"),
        ):
            if key in atom:
                parts.append(f"{label}:[{' '.join(json.dumps(v) for v in atom[key])}]")
        lines.append("{" + ", ".join(parts) + "}")
    return (
        f'{qualified} "{name}" is forbidden: user "{user.name}" (groups=[{groups}]) is '
        "attempting to grant RBAC permissions not currently held:\n" + "\n".join(lines)
    )


# --- a new cluster's policy ----------------------------------------------------------

_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, **_BOOTSTRAP_META},
        "rules": rules,
    }


def _cluster_binding(name: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, **_BOOTSTRAP_META},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_objects() -> list[dict[str, Any]]:
    """The ClusterRoles and ClusterRoleBindings a new cluster has that matter here."""
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_binding("cluster-admin", [MASTERS]),
        _cluster_role(
            "system:discovery",
            [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    "verbs": ["get"],
                }
            ],
        ),
        _cluster_binding("system:discovery", [AUTHENTICATED]),
        _cluster_role("system:public-info-viewer", [{"nonResourceURLs": public, "verbs": ["get"]}]),
        _cluster_binding("system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
    ]


# --- static views for the chart tests ------------------------------------------------

Permission = tuple[str, str, str]  # (API group, resource, verb)


def granted(rules: Iterable[Mapping[str, Any]]) -> set[Permission]:
    """Every (group, resource, verb) the rules grant on any object of the resource.
    Rules limited to ``resourceNames`` grant nothing here: a call on an arbitrary
    object needs an unlimited rule. Wildcards stay ``*`` (and so match nothing else)."""
    out: set[Permission] = set()
    for rule in rules:
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            continue
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    out.add((group, resource, verb))
    return out


def allows(rules: Iterable[Mapping[str, Any]], permission: Permission) -> bool:
    """Whether the rules allow ``verb`` on ``resource`` (``resource/sub`` for a
    subresource) of the group for *any* object — the authorizer's answer for a
    request that names no object: a rule limited to ``resourceNames`` does not."""
    group, resource, verb = permission
    base, _, sub = resource.partition("/")
    attrs = Attributes(UserInfo("static"), verb, api_group=group, resource=base, subresource=sub)
    return any(rule_allows(rule, attrs) for rule in rules)
