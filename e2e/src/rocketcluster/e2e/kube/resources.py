"""Which resources the emulated API server serves: the built-in catalogue and the
resources a CustomResourceDefinition declares.

Pure data and pure functions. The emulator keeps a :class:`Registry` (one per
server, never module state) that starts from :data:`BUILTINS` and grows and shrinks
as CRDs come and go. Objects are stored once per *group resource* (group + plural),
whatever version they are read at, as the API server does with its storage version.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served resource at one version (what discovery lists as one entry)."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    verbs: tuple[str, ...] = ALL_VERBS
    # The openAPIV3Schema of a CRD version; None for built-ins (not validated).
    schema: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    # A CRD version's additionalPrinterColumns (what ``kubectl get`` shows).
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, hash=False)
    # A custom resource (a CRD's, or one of the Prometheus operator's that stand in
    # for CRDs here): the API server refuses strategic merge patches of it, having no
    # patch strategy for its fields.
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_resource(self) -> tuple[str, str]:
        """The storage key: the same objects at every version."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection or of one object."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        return root + (f"/{name}" if name else "")


def _rt(
    api_version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    status: bool = False,
    extra: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    custom: bool = False,
) -> ResourceType:
    group, _, version = api_version.rpartition("/")
    subresources = frozenset((("status",) if status else ()) + extra)
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=namespaced,
        short_names=short,
        categories=categories,
        subresources=subresources,
        custom=custom,
    )


_ALL = ("all",)  # the category `kubectl get all` lists

BUILTINS: tuple[ResourceType, ...] = (
    _rt("v1", "namespaces", "Namespace", namespaced=False, short=("ns",), status=True),
    _rt(
        "v1",
        "pods",
        "Pod",
        short=("po",),
        status=True,
        extra=("log", "eviction"),
        categories=_ALL,
    ),
    _rt("v1", "nodes", "Node", namespaced=False, short=("no",), status=True),
    _rt("v1", "services", "Service", short=("svc",), status=True, categories=_ALL),
    _rt("v1", "endpoints", "Endpoints", short=("ep",)),
    _rt("v1", "configmaps", "ConfigMap", short=("cm",)),
    _rt("v1", "secrets", "Secret"),
    _rt("v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), status=True),
    _rt("v1", "serviceaccounts", "ServiceAccount", short=("sa",), extra=("token",)),
    _rt("v1", "events", "Event", short=("ev",)),
    _rt(
        "apps/v1",
        "statefulsets",
        "StatefulSet",
        short=("sts",),
        status=True,
        extra=("scale",),
        categories=_ALL,
    ),
    _rt(
        "apps/v1",
        "deployments",
        "Deployment",
        short=("deploy",),
        status=True,
        extra=("scale",),
        categories=_ALL,
    ),
    _rt("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",), status=True),
    _rt("rbac.authorization.k8s.io/v1", "roles", "Role"),
    _rt("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding"),
    _rt("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", namespaced=False),
    _rt(
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
    ),
    _rt(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        short=("crd", "crds"),
        status=True,
    ),
    _rt("batch/v1", "jobs", "Job", status=True, categories=_ALL),
    _rt("batch/v1", "cronjobs", "CronJob", short=("cj",), status=True, categories=_ALL),
    _rt("coordination.k8s.io/v1", "leases", "Lease"),
    # A RocketCluster's console Ingress (spec.console.ingress): stored, never served.
    _rt("networking.k8s.io/v1", "ingresses", "Ingress", short=("ing",), status=True),
    # A RocketCluster's NetworkPolicies (spec.networkPolicies): enforced by the realiser.
    _rt("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", short=("netpol",)),
    _rt(
        "monitoring.coreos.com/v1",
        "servicemonitors",
        "ServiceMonitor",
        short=("smon",),
        custom=True,
    ),
    _rt("monitoring.coreos.com/v1", "podmonitors", "PodMonitor", short=("pmon",), custom=True),
    _rt(
        "monitoring.coreos.com/v1",
        "prometheusrules",
        "PrometheusRule",
        short=("promrule",),
        custom=True,
    ),
)

CRD_GROUP_RESOURCE = ("apiextensions.k8s.io", "customresourcedefinitions")


class CrdError(ValueError):
    """A CustomResourceDefinition the API server would refuse; the message says why."""


def from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resources a CRD declares: one per served version, storage version first.

    The schema is the version's ``openAPIV3Schema``; the ``status`` subresource is
    declared per version, as in apiextensions/v1."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group")
    plural = names.get("plural")
    kind = names.get("kind")
    if not group or not plural or not kind:
        raise CrdError("spec.group, spec.names.plural and spec.names.kind are required")
    expected = f"{plural}.{group}"
    if crd.get("metadata", {}).get("name") != expected:
        raise CrdError(
            f'metadata.name: Invalid value: must be spec.names.plural+"."+spec.group ({expected!r})'
        )
    scope = spec.get("scope", "Namespaced")
    if scope not in ("Namespaced", "Cluster"):
        raise CrdError(f"spec.scope: Unsupported value: {scope!r}")
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not versions:
        raise CrdError("spec.versions: Required value: at least one served version")
    versions.sort(key=lambda v: not v.get("storage", False))
    out = []
    for v in versions:
        subresources = frozenset((v.get("subresources") or {}).keys())
        out.append(
            ResourceType(
                group=group,
                version=v["name"],
                plural=plural,
                singular=names.get("singular") or kind.lower(),
                kind=kind,
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subresources,
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
                custom=True,
            )
        )
    return out


def crd_status(crd: Mapping[str, Any]) -> dict[str, Any]:
    """What the apiextensions controller reports once a CRD is served."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind')}List")
    stored = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "storedVersions": stored,
    }


class Registry:
    """The resources one server serves, by (group, version, plural) and by kind."""

    def __init__(self, types: Iterable[ResourceType] = BUILTINS) -> None:
        self._by_gvp: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_owned: dict[str, list[ResourceType]] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_gvp[(rt.group, rt.version, rt.plural)] = rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvp.get((group, version, plural))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._by_gvp.values()))

    def preferred(self, group: str, plural: str) -> ResourceType | None:
        """The storage (first declared) version of a group resource."""
        for rt in self._by_gvp.values():
            if (rt.group, rt.plural) == (group, plural):
                return rt
        return None

    def versions(self, group: str) -> list[str]:
        """Served versions of an API group, preferred first."""
        seen: list[str] = []
        for rt in self._by_gvp.values():
            if rt.group == group and rt.version not in seen:
                seen.append(rt.version)
        return seen

    def declare_crd(self, crd: Mapping[str, Any]) -> list[ResourceType]:
        """Serve what ``crd`` declares, replacing what its earlier version declared."""
        types = from_crd(crd)
        self.forget_crd(crd["metadata"]["name"])
        for rt in types:
            clash = self.get(rt.group, rt.version, rt.plural)
            if clash is not None:
                raise CrdError(f"{rt.plural}.{rt.group}/{rt.version} is already served")
        for rt in types:
            self.add(rt)
        self._crd_owned[crd["metadata"]["name"]] = types
        return types

    def forget_crd(self, name: str) -> list[ResourceType]:
        types = self._crd_owned.pop(name, [])
        for rt in types:
            self._by_gvp.pop((rt.group, rt.version, rt.plural), None)
        return types
