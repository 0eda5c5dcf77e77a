"""The documents clients read before they talk to a resource: API discovery and the
small slice of OpenAPI v3 kubectl needs, built from the :class:`Registry`.

Discovery is what ``kubectl`` maps kinds, short names and categories with (the
legacy per-group-version form; kubectl falls back to it from aggregated discovery).

The OpenAPI documents carry no schemas: each resource gets its collection and
object paths, the object's PATCH naming the ``fieldValidation`` query parameter
and its GVK. That is what kubectl's ``--validate=strict`` (its default) checks
before it leaves validation to the server, so ``kubectl apply -f`` works without
``--validate=false`` and unknown fields of custom resources are refused by the
emulator as by a real server. The PATCH does not advertise strategic merge, so
kubectl computes strategic patches of built-ins from its compiled-in types, not
from schemas we do not have.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rocketcluster.e2e.kube.resources import Registry, ResourceType

_SUB_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "log": ["get"],
    "token": ["create"],
    "eviction": ["create"],
}


def root_paths(registry: Registry) -> dict[str, Any]:
    """``GET /``: the server's paths, as a real API server lists them."""
    paths = {"/api", "/api/v1", "/apis", "/version"}
    for rt in registry:
        if rt.group:
            paths.update({f"/apis/{rt.group}", f"/apis/{rt.group}/{rt.version}"})
    return {"paths": sorted(paths)}


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}


def _group(registry: Registry, group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in registry.versions(group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = []
    for rt in registry:
        if rt.group and rt.group not in groups:
            groups.append(rt.group)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(registry, g) for g in groups],
    }


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    if not registry.versions(group):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, group)}


def _entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _sub_entry(rt: ResourceType, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": f"{rt.plural}/{sub}",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": _SUB_VERBS.get(sub, ["get"]),
    }
    if sub == "scale":
        entry.update(kind="Scale", group="autoscaling", version="v1")
    if sub == "token":  # TokenRequest (what kubectl create token posts)
        entry.update(kind="TokenRequest", group="authentication.k8s.io", version="v1")
    if sub == "eviction":  # what kubectl drain looks for to evict through policy/v1
        entry.update(kind="Eviction", group="policy", version="v1")
    return entry


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [rt for rt in registry if (rt.group, rt.version) == (group, version)]
    if not types:
        return None
    resources = []
    for rt in types:
        resources.append(_entry(rt))
        resources.extend(_sub_entry(rt, sub) for sub in sorted(rt.subresources))
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_root(registry: Registry) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rt in registry:
        gv = _gv_path(rt.group, rt.version)
        if gv not in paths:
            digest = (
                hashlib.sha256(repr(openapi_group_version(registry, rt.group, rt.version)).encode())
                .hexdigest()[:32]
                .upper()
            )
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def openapi_group_version(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [rt for rt in registry if (rt.group, rt.version) == (group, version)]
    if not types:
        return None
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        base = rt.path("{namespace}") if rt.namespaced else rt.path()
        params = [
            {"name": p, "in": "query", "schema": {"type": "string"}}
            for p in ("dryRun", "fieldManager", "fieldValidation")
        ]
        body = {
            "content": {
                t: {"schema": {"type": "object"}}
                for t in (
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                )
            }
        }
        op = {
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        }
        paths[base] = {
            "post": {**op, "x-kubernetes-action": "post"},
            "get": {**op, "x-kubernetes-action": "list"},
        }
        paths[base + "/{name}"] = {
            "get": {**op, "x-kubernetes-action": "get"},
            "put": {**op, "x-kubernetes-action": "put"},
            "patch": {**op, "x-kubernetes-action": "patch", "requestBody": body},
            "delete": {**op, "x-kubernetes-action": "delete"},
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }
