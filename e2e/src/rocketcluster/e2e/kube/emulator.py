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
``scale`` and ``log`` subresources.

Server-side apply (``application/apply-patch+yaml``) is a merge of the applied
object, creating it when missing: no managed fields, so a field dropped from the
applied manifest is *not* removed, unlike on a real server.

``python -m rocketcluster.e2e.kube.emulator --port 0`` prints ``READY <url>`` and
serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
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

from rocketcluster.e2e.kube import discovery, labels, patches, tables
from rocketcluster.e2e.kube.network import SERVICE_NETWORK, IpAllocator, reserve_block
from rocketcluster.e2e.kube.resources import Registry, ResourceType
from rocketcluster.e2e.kube.store import ApiError, Change, Store

HISTORY = 50_000  # watch events kept for resuming from a resourceVersion
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

    def __init__(self, *, pod_logs: Path | None = None) -> None:
        super().__init__()
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
        ns_type = self.registry.get("", "v1", "namespaces")
        if ns_type is not None:
            for name in INITIAL_NAMESPACES:
                self.store.create(ns_type, None, {"metadata": {"name": name}})

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
        if raw.path in ("/healthz", "/readyz", "/livez"):
            return aiohttp.web.Response(text="ok")
        if raw.path.startswith("/openapi/v3"):
            return self._openapi(raw.path)
        route = _route(raw.path)
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


async def serve(host: str, port: int, pod_logs: Path | None) -> None:
    emulator = Emulator(pod_logs=pod_logs)
    server = aiohttp.web.Server(emulator)
    loop = asyncio.get_running_loop()
    async with emulator:
        listener = await loop.create_server(server, host, port)
        bound = listener.sockets[0].getsockname()[1]
        print(f"READY http://{host}:{bound}", flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        listener.close()
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
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.host, args.port, args.pod_logs))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
