"""A Kubernetes API server faithful enough for kubectl, kopf and the pod realiser:
kmock's ``KubernetesEmulator`` with the resource paths served from a :class:`Store`.

kmock keeps what it does well: the server plumbing, the routing of the discovery
documents (``/``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``,
``/version``) — each answered from our :class:`Registry`, so a CRD is discoverable
the moment it is stored — and its ``Status`` errors. Every request on a resource
path is ours: list (``kind: <Kind>List``, label and field selectors), get, watch
(``resourceVersion`` honoured: history replayed from it, or 410 Gone when it is too
old; selector transitions reported as ADDED/DELETED like the real server),
create, PUT, the four PATCH types, delete and deletecollection, and the ``status``,
``scale``, ``log`` and ``eviction`` subresources (evictions judged against
PodDisruptionBudgets by :mod:`disruption`).

Every request is authenticated (:mod:`authn`: the admin token, ServiceAccount
tokens from TokenRequest — ``serviceaccounts/token`` — or anonymous; a token nobody
issued gets 401) and, with ``--authorization-mode RBAC``, authorised by the
Roles and bindings in the store (:mod:`rbac`, with the escalation check on RBAC
writes): a refusal is the API server's 403 Status, also logged as one JSON line
``{"forbidden": {...}}`` on stderr. ``AlwaysAllow`` (the default) authenticates
only. Every namespace gets its ``default`` ServiceAccount.

Server-side apply (``application/apply-patch+yaml``) is a merge of the applied
object, creating it when missing: no managed fields, so a field dropped from the
applied manifest is *not* removed, unlike on a real server.

``python -m rocketcluster.e2e.kube.emulator --port 0`` prints ``READY <url>`` (and,
with ``--tls-dir``, an ``https://`` URL after it: :mod:`tls`) and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import json
import os
import signal
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import yaml

from rocketcluster.e2e.kube import discovery, disruption, labels, patches, rbac, tables, tls
from rocketcluster.e2e.kube.authn import UNAUTHORIZED, Authenticator, Unauthorized
from rocketcluster.e2e.kube.network import SERVICE_NETWORK, IpAllocator, reserve_block
from rocketcluster.e2e.kube.resources import Registry, ResourceType
from rocketcluster.e2e.kube.store import ApiError, Change, Store

HISTORY = 50_000  # watch events kept for resuming from a resourceVersion
AUTHORIZATION_MODES = ("AlwaysAllow", "RBAC")
# where a request keeps its authenticated user
_USER = aiohttp.web.RequestKey("rocketcluster.user", rbac.UserInfo)
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_IDLE_CHECK_S = 5.0


def _route(path: str) -> tuple[str, str, list[str]] | None:
    """(group, version, rest) for a resource-shaped path, else None."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 4 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def _group_version(request: kmock.Request) -> tuple[str, str]:
    res = request.resource
    if res is None or res.group is None or res.version is None:
        raise kmock.KubernetesResourceNotFoundError()
    return res.group, res.version


class Emulator(kmock.KubernetesEmulator):
    """The API server. One per process; all state lives on the instance."""

    def __init__(
        self,
        *,
        pod_logs: Path | None = None,
        admin_token: str | None = None,
        authorization_mode: str = "AlwaysAllow",
        forbidden_log: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        if authorization_mode not in AUTHORIZATION_MODES:
            raise ValueError(f"authorization mode {authorization_mode!r}")
        self.authorization_mode = authorization_mode
        self.authn = Authenticator(admin_token, self._service_account_uid)
        self.forbidden_log = forbidden_log
        self._rbac_index: rbac.RbacIndex | None = None  # None: rebuild on next use
        self.registry = Registry()
        # ClusterIPs from a block no other emulator on this host uses
        block, lock = reserve_block(SERVICE_NETWORK)
        weakref.finalize(self, os.close, lock)
        self._service_ips = IpAllocator(block)
        self.store = Store(self.registry, allocate_ip=self._allocate_service_ip)
        self.history: collections.deque[Change] = collections.deque(maxlen=HISTORY)
        self.watchers: set[asyncio.Queue[Change]] = set()
        self.pod_logs = pod_logs
        self.store.listeners.append(self._fan_out)
        self.store.listeners.append(self._rbac_changed)
        self.store.listeners.append(self._default_service_account)
        for obj in rbac.bootstrap_objects():
            plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
            rbac_type = self.registry.get(rbac.GROUP, "v1", plural[obj["kind"]])
            if rbac_type is not None:
                self.store.create(rbac_type, None, obj)
        ns_type = self.registry.get("", "v1", "namespaces")
        if ns_type is not None:
            for name in INITIAL_NAMESPACES:
                self.store.create(ns_type, None, {"metadata": {"name": name}})

    # --- authentication and authorization -----------------------------------------

    def _service_account_uid(self, namespace: str, name: str) -> str | None:
        rt = self.registry.get("", "v1", "serviceaccounts")
        if rt is None:
            return None
        try:
            return str(self.store.get(rt, namespace, name)["metadata"]["uid"])
        except ApiError:
            return None

    def _rbac_changed(self, change: Change) -> None:
        if change.group_resource[0] == rbac.GROUP:
            self._rbac_index = None

    def _default_service_account(self, change: Change) -> None:
        """Every new namespace gets its ``default`` ServiceAccount (the
        serviceaccounts controller's job)."""
        if change.type != "ADDED" or change.group_resource != ("", "namespaces"):
            return
        rt = self.registry.get("", "v1", "serviceaccounts")
        name = change.obj["metadata"]["name"]
        if rt is not None and self._service_account_uid(name, "default") is None:
            with contextlib.suppress(ApiError):
                self.store.create(rt, name, {"metadata": {"name": "default"}})

    def rbac_index(self) -> rbac.RbacIndex:
        if self._rbac_index is None:
            objects = {}
            for plural in (*rbac.ROLE_KINDS, *rbac.BINDING_KINDS):
                rt = self.registry.get(rbac.GROUP, "v1", plural)
                objects[plural] = [] if rt is None else self.store.list_objects(rt, None)
            self._rbac_index = rbac.RbacIndex.from_objects(objects)
        return self._rbac_index

    def _allowed(self, attrs: rbac.Attributes) -> bool:
        return self.authorization_mode == "AlwaysAllow" or self.rbac_index().authorize(attrs)

    def _forbid(self, attrs: rbac.Attributes, message: str | None = None) -> ApiError:
        """The 403 of a refused request, logged as one JSON line."""
        message = message or rbac.forbidden_message(attrs)
        if self.forbidden_log is not None:
            self.forbidden_log(
                {
                    "user": attrs.user.name,
                    "groups": list(attrs.user.groups),
                    "verb": attrs.verb,
                    "apiGroup": attrs.api_group,
                    "resource": attrs.resource,
                    "subresource": attrs.subresource,
                    "namespace": attrs.namespace,
                    "name": attrs.name,
                    "path": attrs.path,
                    "message": message,
                }
            )
        details: dict[str, Any] = {}
        if attrs.resource_request:
            details = {"group": attrs.api_group, "kind": attrs.resource}
            if attrs.name:
                details["name"] = attrs.name
        return ApiError(403, "Forbidden", message, details)

    def _authorize_resource(
        self,
        raw: aiohttp.web.BaseRequest,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
    ) -> rbac.Attributes:
        q = raw.query
        watch = raw.method.upper() == "GET" and q.get("watch") in ("true", "1")
        verb = rbac.request_verb(raw.method, name=name, watch=watch, subresource=sub)
        target = name or ""
        if not target and verb in ("list", "watch"):  # a metadata.name field selector
            for req in labels.parse_field_selector(q.get("fieldSelector")):
                if req.path == ("metadata", "name") and req.equal:
                    target = req.value
        attrs = rbac.Attributes(
            raw[_USER],
            verb,
            api_group=rt.group,
            resource=rt.plural,
            subresource=sub or "",
            name=target,
            namespace=(namespace or "") if rt.namespaced else "",
        )
        if not self._allowed(attrs):
            raise self._forbid(attrs)
        return attrs

    def _confirm_no_escalation(
        self,
        attrs: rbac.Attributes,
        rt: ResourceType,
        namespace: str | None,
        obj: Any,
    ) -> None:
        """A Role or ClusterRole only with rules its writer holds (or ``escalate``);
        a binding only to a role whose rules the writer holds (or ``bind``)."""
        if self.authorization_mode == "AlwaysAllow" or attrs.user.privileged:
            return
        if not isinstance(obj, dict):
            return
        ns = (namespace or "") if rt.namespaced else ""
        name = str((obj.get("metadata") or {}).get("name") or attrs.name)
        index = self.rbac_index()
        qualified = f"{rt.plural}.{rt.group}"
        if rt.plural in rbac.ROLE_KINDS:
            escalate = rbac.Attributes(
                attrs.user, "escalate", rbac.GROUP, rt.plural, name=name, namespace=ns
            )
            if index.authorize(escalate):
                return
            missing = rbac.uncovered(index.rules_for(attrs.user, ns), obj.get("rules") or [])
        else:
            ref = obj.get("roleRef") or {}
            ref_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
            bind = rbac.Attributes(
                attrs.user, "bind", rbac.GROUP, ref_plural, name=ref.get("name", ""), namespace=ns
            )
            if index.authorize(bind):
                return
            ref_type = self.registry.get(rbac.GROUP, "v1", ref_plural)
            try:
                if ref_type is None:
                    raise ApiError(404, "NotFound", f"{ref_plural} are not served")
                role = self.store.get(ref_type, ns or None, str(ref.get("name", "")))
            except ApiError as exc:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{qualified} "{name}" is forbidden: {exc.message}',
                    {"name": name, "group": rt.group, "kind": rt.plural},
                ) from exc
            missing = rbac.uncovered(index.rules_for(attrs.user, ns), role.get("rules") or [])
        if missing:
            message = rbac.escalation_message(attrs.user, qualified, name, missing)
            raise self._forbid(attrs, message)

    def _allocate_service_ip(self, namespace: str, name: str) -> str:
        return self._service_ips.allocate(f"{namespace}/{name}")

    def _fan_out(self, change: Change) -> None:
        self.history.append(change)
        for queue in self.watchers:
            queue.put_nowait(change)

    # Discovery comes from our registry: kmock's derives it from its own store, with
    # a "/v1" group version for the core group and short names on subresources.
    async def _serve_root(self, request: kmock.Request) -> Any:
        return discovery.root_paths(self.registry)

    async def _serve_api(self, request: kmock.Request) -> Any:
        return discovery.api_versions()

    async def _serve_apis(self, request: kmock.Request) -> Any:
        return discovery.api_group_list(self.registry)

    async def _serve_group(self, request: kmock.Request) -> Any:
        group, _ = _group_version(request)
        doc = discovery.api_group(self.registry, group)
        if doc is None:
            raise kmock.KubernetesResourceNotFoundError()
        return doc

    async def _serve_version(self, request: kmock.Request) -> Any:
        group, version = _group_version(request)
        doc = discovery.api_resource_list(self.registry, group, version)
        if doc is None:
            raise kmock.KubernetesResourceNotFoundError()
        return doc

    async def _serve_server_version(self, request: kmock.Request) -> Any:
        return {
            "major": "1",
            "minor": "34",
            "gitVersion": "v1.34.0-rocketcluster-emulator",
            "gitTreeState": "clean",
            "platform": "linux/amd64",
        }

    def _openapi(self, path: str) -> aiohttp.web.StreamResponse:
        rest = path.removeprefix("/openapi/v3").strip("/")
        if not rest:
            return self._json(discovery.openapi_root(self.registry))
        parts = rest.split("/")
        doc = None
        if parts[0] == "api" and len(parts) == 2:
            doc = discovery.openapi_group_version(self.registry, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = discovery.openapi_group_version(self.registry, parts[1], parts[2])
        if doc is None:
            err = ApiError(404, "NotFound", f"no OpenAPI document for {rest}")
            return self._json(err.status(), status=404)
        return self._json(doc)

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        try:
            raw[_USER] = self.authn.authenticate(raw.headers.get("Authorization"))
        except Unauthorized:
            return aiohttp.web.json_response(UNAUTHORIZED, status=401)
        route = _route(raw.path)
        if route is None:  # a non-resource URL: discovery, version, health, OpenAPI
            attrs = rbac.Attributes(raw[_USER], rbac.non_resource_verb(raw.method), path=raw.path)
            if not self._allowed(attrs):
                err = self._forbid(attrs)
                return aiohttp.web.json_response(err.status(), status=err.code)
        if raw.path in ("/healthz", "/readyz", "/livez"):
            return aiohttp.web.Response(text="ok")
        if raw.path.startswith("/openapi/v3"):
            return self._openapi(raw.path)
        if route is not None:
            try:
                return await self._serve_resource(raw, *route)
            except ApiError as exc:
                return aiohttp.web.json_response(exc.status(), status=exc.code)
            except (patches.PatchError, labels.SelectorError, ValueError) as exc:
                err = ApiError(
                    422 if isinstance(exc, patches.PatchError) else 400,
                    "Invalid" if isinstance(exc, patches.PatchError) else "BadRequest",
                    str(exc),
                )
                return aiohttp.web.json_response(err.status(), status=err.code)
            finally:
                if self.store.garbage_pending():
                    asyncio.get_running_loop().call_soon(self.store.collect_garbage)
        response = await super().__call__(raw)
        del self._requests[:]  # kmock keeps every request for assertions: not here
        for errors in self._errors:
            del errors[:]
        return response

    # --- resource requests ---------------------------------------------------------

    def _resolve(
        self, group: str, version: str, rest: list[str]
    ) -> tuple[ResourceType, str | None, str | None, str | None]:
        """(type, namespace, name, subresource) of a resource path."""
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = self.registry.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = self.registry.get(group, version, rest[0])
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = "/".join(rest[2:]) or None
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rt, namespace, name, sub

    async def _serve_resource(
        self, raw: aiohttp.web.BaseRequest, group: str, version: str, rest: list[str]
    ) -> aiohttp.web.StreamResponse:
        rt, namespace, name, sub = self._resolve(group, version, rest)
        attrs = self._authorize_resource(raw, rt, namespace, name, sub)
        q = raw.query
        method = raw.method.upper()
        dry_run = q.get("dryRun") == "All"
        validation = q.get("fieldValidation", "Warn")
        strict = validation == "Strict"
        if method == "GET" and q.get("watch") in ("true", "1"):
            return await self._watch(raw, rt, namespace, name)
        table = tables.wants_table(raw.headers.get("Accept", ""))
        if method == "GET" and name is None:
            items = self.store.list_objects(
                rt,
                namespace,
                labels.parse_label_selector(q.get("labelSelector")),
                labels.parse_field_selector(q.get("fieldSelector")),
            )
            version = str(self.store.resource_version)
            if table:
                return self._json(tables.table(items, rt.printer_columns, version))
            return self._json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(self.store.resource_version)},
                    "items": items,
                }
            )
        body = await self._body(raw)
        if rt.group == rbac.GROUP and sub is None and method in ("POST", "PUT", "PATCH"):
            would_be = body
            if method == "PATCH" and name is not None:
                would_be = self._patch(rt, namespace, name, sub, raw, body, True, strict)
            self._confirm_no_escalation(attrs, rt, namespace, would_be)
        if sub == "token" and method == "POST" and name is not None:
            return self._token_request(rt, namespace, name, body)
        if method == "POST" and name is None:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body is not a JSON object")
            return self._json(
                self.store.create(rt, namespace, body, dry_run=dry_run, strict=strict), status=201
            )
        if method == "DELETE" and name is None:
            return self._delete_collection(rt, namespace, q, body)
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if sub == "log":
            return self._log(rt, namespace, name, q)
        if sub == "scale":
            return await self._scale(rt, namespace, name, method, raw, body, dry_run)
        if sub == "eviction":
            return self._evict(rt, namespace, name, method, body, dry_run)
        if method == "GET":
            obj = self.store.get(rt, namespace, name)
            if table:
                version = str(obj["metadata"].get("resourceVersion", ""))
                return self._json(tables.table([obj], rt.printer_columns, version))
            return self._json(obj)
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body is not a JSON object")
            return self._json(
                self.store.update(
                    rt,
                    namespace,
                    name,
                    lambda _: body,
                    subresource=sub,
                    dry_run=dry_run,
                    strict=strict,
                )
            )
        if method == "PATCH":
            return self._json(self._patch(rt, namespace, name, sub, raw, body, dry_run, strict))
        if method == "DELETE":
            options = body if isinstance(body, dict) else {}
            policy = q.get("propagationPolicy") or options.get("propagationPolicy")
            if options.get("orphanDependents") is True:
                policy = "Orphan"
            uid = (options.get("preconditions") or {}).get("uid")
            grace = q.get("gracePeriodSeconds") or options.get("gracePeriodSeconds")
            obj = self.store.delete(
                rt,
                namespace,
                name,
                propagation=policy,
                dry_run=dry_run,
                uid_precondition=uid,
                grace_period=None if grace is None else int(grace),
            )
            return self._json(obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        sub: str | None,
        raw: aiohttp.web.BaseRequest,
        body: Any,
        dry_run: bool,
        strict: bool,
    ) -> dict[str, Any]:
        ctype = raw.content_type
        apply = ctype.startswith("application/apply-patch")
        fn: Callable[[dict[str, Any]], Any]
        if ctype == "application/json-patch+json":
            fn = lambda obj: patches.json_patch(obj, body)  # noqa: E731
        elif ctype == "application/strategic-merge-patch+json":
            if rt.custom:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an "
                    "unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml",
                )
            fn = lambda obj: patches.strategic_merge_patch(obj, body)  # noqa: E731
        elif ctype == "application/merge-patch+json" or apply:
            fn = lambda obj: patches.merge_patch(obj, body)  # noqa: E731
        else:
            raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")
        if not isinstance(body, dict | list):
            raise ApiError(400, "BadRequest", "the patch is not a JSON object or list")
        try:
            return self.store.update(
                rt, namespace, name, fn, subresource=sub, dry_run=dry_run, strict=strict
            )
        except ApiError as exc:
            if not (apply and exc.code == 404 and sub is None and isinstance(body, dict)):
                raise
            return self.store.create(
                rt,
                namespace,
                {**body, "metadata": {**(body.get("metadata") or {}), "name": name}},
                dry_run=dry_run,
                strict=strict,
            )

    def _token_request(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any
    ) -> aiohttp.web.StreamResponse:
        """TokenRequest: a token for an existing ServiceAccount (bound to its uid)."""
        account = self.store.get(rt, namespace, name)
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        seconds = int(spec.get("expirationSeconds") or 3600)
        token = self.authn.mint(str(namespace), name, account["metadata"]["uid"])
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
        return self._json(
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
                    "expirationSeconds": seconds,
                    "boundObjectRef": spec.get("boundObjectRef"),
                },
                "status": {
                    "token": token,
                    "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
            },
            status=201,
        )

    def _delete_collection(
        self, rt: ResourceType, namespace: str | None, q: Any, body: Any
    ) -> aiohttp.web.StreamResponse:
        options = body if isinstance(body, dict) else {}
        policy = q.get("propagationPolicy") or options.get("propagationPolicy")
        items = self.store.list_objects(
            rt,
            namespace,
            labels.parse_label_selector(q.get("labelSelector")),
            labels.parse_field_selector(q.get("fieldSelector")),
        )
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                self.store.delete(rt, meta.get("namespace"), meta["name"], propagation=policy)
        return self._json(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {}, "items": items}
        )

    async def _scale(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        method: str,
        raw: aiohttp.web.BaseRequest,
        body: Any,
        dry_run: bool,
    ) -> aiohttp.web.StreamResponse:
        def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
            meta = obj["metadata"]
            selector = (obj.get("spec") or {}).get("selector") or {}
            text = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    k: meta[k]
                    for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                    if k in meta
                },
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
                "status": {
                    "replicas": (obj.get("status") or {}).get("replicas", 0),
                    "selector": text,
                },
            }

        if method == "GET":
            return self._json(scale_of(self.store.get(rt, namespace, name)))

        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            scale = scale_of(obj)
            if method == "PUT":
                wanted = body
            elif raw.content_type == "application/json-patch+json":
                wanted = patches.json_patch(scale, body)
            else:
                wanted = patches.merge_patch(scale, body)
            replicas = (wanted.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise ApiError(
                    422,
                    "Invalid",
                    f'Scale.autoscaling "{name}" is invalid: '
                    f"spec.replicas: Invalid value: {replicas!r}",
                )
            obj.setdefault("spec", {})["replicas"] = replicas
            return obj

        obj = self.store.update(rt, namespace, name, mutate, dry_run=dry_run)
        return self._json(scale_of(obj))

    def _evict(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        method: str,
        body: Any,
        dry_run: bool,
    ) -> aiohttp.web.StreamResponse:
        """``POST pods/<name>/eviction``: the pod is deleted (with the Eviction's
        ``deleteOptions``) when its PodDisruptionBudget allows it (:mod:`disruption`);
        otherwise 429, or 500 when more than one budget selects it."""
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on pods/eviction")
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body is not an Eviction object")
        named = (body.get("metadata") or {}).get("name")
        if named not in (None, "", name):
            raise ApiError(
                400, "BadRequest", f"name in URL does not match name in Eviction object: {named}"
            )
        pod = self.store.get(rt, namespace, name)
        pdb_rt = self.registry.preferred("policy", "poddisruptionbudgets")
        pdbs = [] if pdb_rt is None else self.store.list_objects(pdb_rt, namespace)
        verdict = disruption.judge(
            pod, pdbs, self.store.list_objects(rt, namespace), self._scale_of
        )
        if not verdict.allowed:
            details: dict[str, Any] = {"name": name, "kind": "pods"}
            if verdict.causes:
                details["causes"] = list(verdict.causes)
            raise ApiError(verdict.code, verdict.reason, verdict.message, details)
        options = body.get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        self.store.delete(
            rt,
            namespace,
            name,
            propagation=options.get("propagationPolicy"),
            dry_run=dry_run or options.get("dryRun") == ["All"],
            uid_precondition=(options.get("preconditions") or {}).get("uid"),
            grace_period=None if grace is None else int(grace),
        )
        return self._json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"},
            status=201,
        )

    def _scale_of(self, kind: str, namespace: str, name: str) -> int | None:
        """A pod controller's ``spec.replicas`` (the disruption controller's scale)."""
        for rt in self.registry:
            if rt.kind == kind and rt.group in ("apps", "") and "scale" in rt.subresources:
                try:
                    obj = self.store.get(rt, namespace, name)
                except ApiError:
                    return None
                return int((obj.get("spec") or {}).get("replicas", 1))
        return None

    def _log(
        self, rt: ResourceType, namespace: str | None, name: str, q: Any
    ) -> aiohttp.web.StreamResponse:
        pod = self.store.get(rt, namespace, name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = q.get("container") or (containers[0] if len(containers) == 1 else None)
        if container is None:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: {containers}",
            )
        if self.pod_logs is None:
            raise ApiError(404, "NotFound", "pod logs are not served (no --pod-logs)")
        path = self.pod_logs / str(namespace) / f"{name}_{container}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        if q.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(q["tailLines"]) :])
        return aiohttp.web.Response(text=text, content_type="text/plain")

    async def _body(self, raw: aiohttp.web.BaseRequest) -> Any:
        data = await raw.read()
        if not data:
            return None
        if raw.content_type.startswith("application/apply-patch"):
            return yaml.safe_load(data)
        if "protobuf" in raw.content_type or "cbor" in raw.content_type:
            # what a real server answers for a type it cannot decode; client-go then
            # falls back to JSON for the rest of the client's life
            raise ApiError(
                415, "UnsupportedMediaType", f"the body type {raw.content_type} is not supported"
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not JSON: {exc}") from exc

    def _json(self, payload: Any, status: int = 200) -> aiohttp.web.StreamResponse:
        return aiohttp.web.Response(
            body=json.dumps(payload).encode(), status=status, content_type="application/json"
        )

    # --- watch ---------------------------------------------------------------------

    async def _watch(
        self,
        raw: aiohttp.web.BaseRequest,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
    ) -> aiohttp.web.StreamResponse:
        q = raw.query
        lsel = labels.parse_label_selector(q.get("labelSelector"))
        fsel = labels.parse_field_selector(q.get("fieldSelector"))
        if name is not None:
            fsel = (*fsel, labels.FieldRequirement(("metadata", "name"), True, name))
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        since = q.get("resourceVersion") or "0"

        def wanted(obj: dict[str, Any] | None, ns: str) -> bool:
            if obj is None or (namespace is not None and rt.namespaced and ns != namespace):
                return False
            meta = obj.get("metadata", {})
            return labels.matches(lsel, meta.get("labels")) and labels.field_matches(fsel, obj)

        def translate(change: Change) -> dict[str, Any] | None:
            if change.group_resource != rt.group_resource:
                return None
            new_ok = wanted(change.obj, change.namespace)
            old_ok = change.old is not None and wanted(change.old, change.namespace)
            kind = change.type
            if kind == "MODIFIED":
                kind = (
                    ("MODIFIED" if old_ok else "ADDED") if new_ok else ("DELETED" if old_ok else "")
                )
            elif kind == "DELETED":
                kind = "DELETED" if old_ok or new_ok else ""
            elif not new_ok:
                kind = ""
            if not kind:
                return None
            obj = dict(change.obj, apiVersion=rt.api_version, kind=rt.kind)
            return {"type": kind, "object": obj}

        queue: asyncio.Queue[Change] = asyncio.Queue()
        initial: list[dict[str, Any]] = []
        if since == "0":
            objs = self.store.list_objects(rt, namespace, lsel, fsel)
            initial = [{"type": "ADDED", "object": obj} for obj in objs]
        else:
            wanted_rv = int(since)
            oldest = self.history[0].resource_version if self.history else None
            if (
                len(self.history) == self.history.maxlen
                and oldest is not None
                and (wanted_rv < oldest - 1)
            ):
                gone = ApiError(410, "Expired", f"too old resource version: {since} ({oldest})")
                initial = [{"type": "ERROR", "object": gone.status()}]
            else:
                for change in self.history:
                    if change.resource_version > wanted_rv:
                        event = translate(change)
                        if event is not None:
                            initial.append(event)
        expired = bool(initial) and initial[0]["type"] == "ERROR"
        self.watchers.add(queue)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(raw)
            for event in initial:
                await response.write(json.dumps(event).encode() + b"\n")
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while not expired:
                wait = (
                    _IDLE_CHECK_S
                    if deadline is None
                    else min(_IDLE_CHECK_S, deadline - loop.time())
                )
                if wait <= 0:
                    break
                try:
                    change = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if raw.transport is None or raw.transport.is_closing():
                        break
                    continue
                event = translate(change)
                if event is not None:
                    await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError, RuntimeError):
            pass
        finally:
            self.watchers.discard(queue)
        return response


def log_forbidden(entry: dict[str, Any]) -> None:
    """A refused request as one JSON line on stderr (the harness's ``emulator.log``)."""
    print(json.dumps({"forbidden": entry}, sort_keys=True), file=sys.stderr, flush=True)


async def serve(
    host: str,
    port: int,
    pod_logs: Path | None,
    *,
    admin_token: str | None = None,
    authorization_mode: str = "AlwaysAllow",
    tls_dir: Path | None = None,
) -> None:
    emulator = Emulator(
        pod_logs=pod_logs,
        admin_token=admin_token,
        authorization_mode=authorization_mode,
        forbidden_log=log_forbidden,
    )
    server = aiohttp.web.Server(emulator)
    loop = asyncio.get_running_loop()
    async with emulator:
        listener = await loop.create_server(server, host, port)
        bound = listener.sockets[0].getsockname()[1]
        urls = [f"http://{host}:{bound}"]
        listeners = [listener]
        if tls_dir is not None:  # for kubectl, which sends credentials only over TLS
            tls.serving_certificate(tls_dir)
            secure = await loop.create_server(server, host, 0, ssl=tls.server_context(tls_dir))
            listeners.append(secure)
            urls.append(f"https://{host}:{secure.sockets[0].getsockname()[1]}")
        print("READY " + " ".join(urls), flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for each in listeners:
            each.close()
        await server.shutdown(1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--pod-logs",
        type=Path,
        default=None,
        help="the realiser's logs dir, to serve pods/log from",
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        help="a file holding the bearer token of the admin user (system:masters)",
    )
    parser.add_argument(
        "--authorization-mode",
        choices=AUTHORIZATION_MODES,
        default="AlwaysAllow",
        help="RBAC: evaluate Roles and bindings; AlwaysAllow: authenticate only",
    )
    parser.add_argument(
        "--tls-dir",
        type=Path,
        default=None,
        help="also serve HTTPS with a certificate written here (tls.crt, by the CA ca.crt)",
    )
    args = parser.parse_args(argv)
    admin_token = args.admin_token_file.read_text().strip() if args.admin_token_file else None
    try:
        asyncio.run(
            serve(
                args.host,
                args.port,
                args.pod_logs,
                admin_token=admin_token,
                authorization_mode=args.authorization_mode,
                tls_dir=args.tls_dir,
            )
        )
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
