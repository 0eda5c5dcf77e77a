"""The emulated API server's storage and write rules, free of HTTP and asyncio.

One :class:`Store` per server holds every object once (keyed by group resource,
namespace and name, whatever version it is read at) and applies what kube-apiserver
applies on each write:

- metadata: ``uid``, ``creationTimestamp``, ``namespace`` from the URL,
  ``generateName``, one global ``resourceVersion`` counter, ``generation`` (1 at
  create, +1 when anything outside ``metadata`` and ``status`` changes);
- the status subresource: writes to ``…/status`` change only ``status``; writes to the
  object leave ``status`` alone; status sent on create is replaced by the initial one;
- optimistic concurrency: a write naming a ``resourceVersion`` must name the current;
- defaults and immutable fields of built-ins (:mod:`admission`), pruning, defaults
  and validation of custom resources (:mod:`schema`);
- CRDs: creating one serves its resource (the :class:`Registry` grows), deleting one
  deletes its objects and stops serving it;
- deletion: finalizers (``deletionTimestamp`` first, removal when the last finalizer
  goes), namespaces (Terminating, contents deleted, removed once empty), and
  garbage collection by ownerReferences (Background, Foreground, Orphan).

Garbage collection runs when :meth:`Store.collect_garbage` is called — the
emulator calls it right after each request, so a DELETE is answered before its
dependents go, as with the real (asynchronous) collector. Every change is reported
to the listeners as a :class:`Change`; the emulator turns them into watch events.
"""

from __future__ import annotations

import copy
import datetime
import random
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rocketcluster.e2e.kube import admission, labels, schema
from rocketcluster.e2e.kube.resources import (
    CRD_GROUP_RESOURCE,
    CrdError,
    Registry,
    ResourceType,
    crd_status,
    from_crd,
)
from rocketcluster.e2e.kube.templates import SAFE_ALPHABET

Key = tuple[str, str, str, str]  # group, plural, namespace ("" if cluster-scoped), name
Mutation = Callable[[dict[str, Any]], dict[str, Any]]
NAMESPACES = ("", "namespaces")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAMED = frozenset({"Namespace", "Service"})
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


class ApiError(Exception):
    """A refusal, carried to the client as a ``Status`` with this code and reason."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


@dataclass(frozen=True)
class Change:
    """One stored change, as a watch reports it (``old`` is None for ADDED)."""

    type: str  # ADDED, MODIFIED, DELETED
    group_resource: tuple[str, str]
    namespace: str
    resource_version: int
    obj: dict[str, Any]
    old: dict[str, Any] | None


def _qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(rt)} "{name}" not found',
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


def _stored_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What makes two versions of an object different (the version read at aside)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything ``generation`` tracks."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    def __init__(
        self,
        registry: Registry,
        *,
        clock: Callable[[], datetime.datetime] | None = None,
        allocate_ip: Callable[[str, str], str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.registry = registry
        self._clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._allocate_ip = allocate_ip or (lambda ns, name: "None")
        self._rng = rng or random.Random()
        self._objects: dict[Key, dict[str, Any]] = {}
        self._uids: dict[str, Key] = {}
        self._gc_queue: list[str] = []  # uids of removed owners
        self.resource_version = 0
        self.listeners: list[Callable[[Change], None]] = []

    # --- reading -------------------------------------------------------------------

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (rt.group, rt.plural, (namespace or "") if rt.namespaced else "", name)

    def _at(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        out["apiVersion"] = rt.api_version
        out["kind"] = rt.kind
        return out

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._objects.get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return self._at(rt, obj)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: labels.Selector = (),
        field_selector: tuple[labels.FieldRequirement, ...] = (),
    ) -> list[dict[str, Any]]:
        out = []
        for key, obj in sorted(self._objects.items()):
            if key[:2] != rt.group_resource:
                continue
            if namespace is not None and rt.namespaced and key[2] != namespace:
                continue
            meta = obj.get("metadata", {})
            if labels.matches(label_selector, meta.get("labels")) and labels.field_matches(
                field_selector, obj
            ):
                out.append(self._at(rt, obj))
        return out

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        return iter(list(self._objects.items()))

    # --- writing -------------------------------------------------------------------

    def _now(self) -> str:
        return self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")

    def _commit(
        self, rt: ResourceType, key: Key, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self._objects[key] = obj
        self._uids[obj["metadata"]["uid"]] = key
        self._emit("MODIFIED" if old is not None else "ADDED", key, obj, old)
        return self._at(rt, obj)

    def _emit(self, kind: str, key: Key, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        change = Change(kind, key[:2], key[2], self.resource_version, copy.deepcopy(obj), old)
        for listener in list(self.listeners):
            listener(change)

    def _check_namespace(self, rt: ResourceType, namespace: str | None) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the server could not find the requested resource: a namespace is required",
            )
        ns = self._objects.get(("", "namespaces", "", namespace))
        if ns is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace "
                f"{namespace} because it is being terminated",
            )

    def _check_name(self, rt: ResourceType, name: str) -> None:
        if rt.group == "rbac.authorization.k8s.io":  # path segment names: system:… roles
            bad = [c for c in ("/", "%") if c in name]
            if name in (".", "..") or bad:
                err = schema.FieldError(
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": may not be "." or ".." and may not '
                    "contain '/' or '%'",
                )
                raise self._invalid(rt, name, [err])
            return
        pattern = _LABEL if rt.kind in _LABEL_NAMED else _SUBDOMAIN
        limit = 63 if rt.kind in _LABEL_NAMED else 253
        if not pattern.match(name) or len(name) > limit:
            what = "RFC 1123 label" if rt.kind in _LABEL_NAMED else "RFC 1123 subdomain"
            err = schema.FieldError(
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                f"alphanumeric characters, '-' or '.', and must start and end with an "
                f"alphanumeric character",
            )
            raise self._invalid(rt, name, [err])

    def _invalid(self, rt: ResourceType, name: str, errors: list[schema.FieldError]) -> ApiError:
        causes = [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors]
        message = schema.invalid_message(rt.kind, rt.group, name, errors)
        return ApiError(
            422,
            "Invalid",
            message,
            {"name": name, "group": rt.group, "kind": rt.kind, "causes": causes},
        )

    def _admit(self, rt: ResourceType, obj: dict[str, Any], strict: bool) -> dict[str, Any]:
        """Defaults, pruning and validation of the object about to be stored."""
        name = obj["metadata"].get("name", "")
        if rt.schema is not None:
            obj, dropped = schema.prune(rt.schema, obj)
            if dropped and strict:
                fields = ", ".join(f'unknown field "{d}"' for d in dropped)
                raise ApiError(
                    400,
                    "BadRequest",
                    f'{rt.kind} in version "{rt.version}" cannot '
                    f"be handled as a {rt.kind}: strict decoding error: {fields}",
                )
            obj = schema.apply_defaults(rt.schema, obj)
            errors = schema.validate(rt.schema, obj)
            if errors:
                raise self._invalid(rt, name, errors)
        else:
            obj = admission.apply_defaults(rt, obj, allocate_ip=self._allocate_ip)
        if rt.group_resource == CRD_GROUP_RESOURCE:
            try:
                from_crd(obj)
            except CrdError as exc:
                raise ApiError(
                    422,
                    "Invalid",
                    f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: {exc}',
                ) from exc
        return obj

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        strict: bool = False,
    ) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {}) or {}
        obj["metadata"] = meta
        if rt.namespaced:
            if namespace and meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does "
                    "not match the namespace sent on the request",
                )
            namespace = namespace or meta.get("namespace")
        self._check_namespace(rt, namespace)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise self._invalid(
                    rt,
                    "",
                    [
                        schema.FieldError(
                            "metadata.name",
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                        )
                    ],
                )
            suffix = "".join(self._rng.choice(SAFE_ALPHABET) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        self._check_name(rt, meta["name"])
        key = self._key(rt, namespace, meta["name"])
        if key in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{_qualified(rt)} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": rt.group, "kind": rt.plural},
            )
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self._now()
        meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        obj = self._admit(rt, obj, strict)
        if rt.has_status:
            obj.pop("status", None)
            initial = admission.initial_status(rt, obj)
            if initial is not None:
                obj["status"] = initial
        if rt.group_resource == CRD_GROUP_RESOURCE:
            obj["status"] = crd_status(obj)
        if dry_run:
            return self._at(rt, obj)
        if rt.group_resource == CRD_GROUP_RESOURCE:
            self._declare(obj)
        result = self._commit(rt, key, obj, None)
        owners = [ref.get("uid") for ref in meta.get("ownerReferences") or []]
        if owners and not any(uid in self._uids for uid in owners):
            self._gc_queue.extend(owners)  # created with absent owners: collected
        return result

    def _declare(self, crd: dict[str, Any]) -> None:
        try:
            self.registry.declare_crd(crd)
        except CrdError as exc:
            raise ApiError(
                422,
                "Invalid",
                f"CustomResourceDefinition.apiextensions.k8s.io "
                f'"{crd["metadata"]["name"]}" is invalid: {exc}',
            ) from exc

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Mutation,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Apply ``mutate`` (a patch or a replacement) to the stored object and store
        the result under the API server's rules."""
        key = self._key(rt, namespace, name)
        old = self._objects.get(key)
        if old is None:
            raise not_found(rt, name)
        proposed = mutate(self._at(rt, old))
        if not isinstance(proposed, dict):
            raise ApiError(400, "BadRequest", "the patched object is not a JSON object")
        meta = proposed.get("metadata") or {}
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv not in (None, "") and str(wanted_rv) != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {_qualified(rt)} "
                f'"{name}": the object has been modified; please apply your changes '
                "to the latest version and try again",
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        if meta.get("name", name) != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does "
                f"not match the name on the URL ({name})",
            )
        new = self._merge_rules(rt, old, proposed, subresource)
        new = self._admit(rt, new, strict)
        if rt.schema is None and subresource is None:
            errors = admission.immutable_errors(rt, old, new)
            if errors:
                raise self._invalid(rt, name, errors)
        if rt.group_resource == CRD_GROUP_RESOURCE:
            new["status"] = crd_status(new)
        if _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if dry_run:
            return self._at(rt, new)
        if _stored_part(new) == _stored_part(old):
            return self._at(rt, old)  # no change: no new resourceVersion, no event
        if rt.group_resource == CRD_GROUP_RESOURCE:
            self._declare(new)
        result = self._commit(rt, key, new, old)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._remove(key)
        return result

    def _merge_rules(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        proposed: dict[str, Any],
        subresource: str | None,
    ) -> dict[str, Any]:
        """The stored object after a write: server-owned metadata kept, and status or
        everything else taken from ``proposed`` depending on the subresource."""
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in proposed:
                new["status"] = copy.deepcopy(proposed["status"])
            else:
                new.pop("status", None)
            return new
        new = copy.deepcopy(proposed)
        meta = new.setdefault("metadata", {}) or {}
        new["metadata"] = meta
        old_meta = old["metadata"]
        for field in (
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "name",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if rt.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise self._invalid(
                    rt,
                    meta["name"],
                    [
                        schema.FieldError(
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            f"Forbidden: no new finalizers can be added if the object is being "
                            f"deleted, found new finalizers {sorted(added)}",
                        )
                    ],
                )
        if rt.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    # --- deleting ------------------------------------------------------------------

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        dry_run: bool = False,
        uid_precondition: str | None = None,
        grace_period: int | None = None,
    ) -> dict[str, Any]:
        """Delete now, or mark for deletion while finalizers remain (a pod's
        ``deletionGracePeriodSeconds`` is the request's, else its spec's)."""
        key = self._key(rt, namespace, name)
        obj = self._objects.get(key)
        if obj is None:
            raise not_found(rt, name)
        if uid_precondition and obj["metadata"]["uid"] != uid_precondition:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: "
                f"{uid_precondition}, UID in object meta: {obj['metadata']['uid']}",
            )
        if dry_run:
            return self._at(rt, obj)
        meta = obj["metadata"]
        policy = propagation or "Background"
        if policy == "Orphan":
            self._orphan(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self._dependents(meta["uid"])
            and FOREGROUND not in finalizers
        ):
            finalizers.append(FOREGROUND)
        if key[:2] == NAMESPACES:
            return self._delete_namespace(rt, key)
        if finalizers:
            if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
                return self._at(rt, obj)
            new = copy.deepcopy(obj)
            new["metadata"]["finalizers"] = finalizers
            new["metadata"].setdefault("deletionTimestamp", self._now())
            if grace_period is None and rt.kind == "Pod":
                grace_period = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            new["metadata"].setdefault("deletionGracePeriodSeconds", int(grace_period or 0))
            result = self._commit(rt, key, new, obj)
            if policy == "Foreground":
                for dep in self._dependents(meta["uid"]):
                    self._delete_key(dep, "Foreground")
            return result
        self._remove(key)
        return self._at(rt, obj)

    def _delete_namespace(self, rt: ResourceType, key: Key) -> dict[str, Any]:
        obj = self._objects[key]
        name = key[3]
        if not obj["metadata"].get("deletionTimestamp"):
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = self._now()
            new.setdefault("status", {})["phase"] = "Terminating"
            self._commit(rt, key, new, obj)
        for other in [k for k in self._objects if k[2] == name]:
            self._delete_key(other, "Background")
        self._finish_namespace(name)
        return self._at(rt, self._objects.get(key, obj))

    def _finish_namespace(self, name: str) -> None:
        key = ("", "namespaces", "", name)
        ns = self._objects.get(key)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if not any(k[2] == name for k in self._objects):
            self._remove(key)

    def _delete_key(self, key: Key, propagation: str) -> None:
        rt = self.registry.preferred(key[0], key[1])
        if rt is not None and key in self._objects:
            self.delete(rt, key[2] or None, key[3], propagation=propagation)

    def _remove(self, key: Key) -> None:
        obj = self._objects.pop(key)
        uid = obj["metadata"]["uid"]
        self._uids.pop(uid, None)
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self._emit("DELETED", key, obj, obj)
        self._gc_queue.append(uid)
        if key[:2] == CRD_GROUP_RESOURCE:
            for rt in self.registry.forget_crd(key[3]):
                for other in [k for k in self._objects if k[:2] == rt.group_resource]:
                    self._remove(other)  # finalizers of custom resources are not waited for
        if key[2]:
            self._finish_namespace(key[2])

    def _dependents(self, owner_uid: str) -> list[Key]:
        return [
            key
            for key, obj in self._objects.items()
            if any(r.get("uid") == owner_uid for r in obj["metadata"].get("ownerReferences") or [])
        ]

    def _orphan(self, owner_uid: str) -> None:
        for key in self._dependents(owner_uid):
            old = self._objects[key]
            new = copy.deepcopy(old)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != owner_uid]
            new["metadata"]["ownerReferences"] = refs
            if not refs:
                del new["metadata"]["ownerReferences"]
            rt = self.registry.preferred(key[0], key[1])
            if rt is not None:
                self._commit(rt, key, new, old)

    def garbage_pending(self) -> bool:
        return bool(self._gc_queue)

    def collect_garbage(self) -> None:
        """Delete what lost its last owner (cascading), drop dangling owner references
        where other owners remain, and finish foreground deletions whose dependents
        are gone."""
        while self._gc_queue:
            gone = self._gc_queue.pop(0)
            for key in self._dependents(gone):
                obj = self._objects.get(key)
                if obj is None:
                    continue
                refs = obj["metadata"].get("ownerReferences") or []
                alive = [r for r in refs if r.get("uid") in self._uids]
                if not alive:
                    self._delete_key(key, "Background")
                elif len(alive) != len(refs):
                    rt = self.registry.preferred(key[0], key[1])
                    new = copy.deepcopy(obj)
                    new["metadata"]["ownerReferences"] = alive
                    if rt is not None:
                        self._commit(rt, key, new, obj)
            self._finish_foreground()

    def _finish_foreground(self) -> None:
        for key, obj in list(self._objects.items()):
            meta = obj["metadata"]
            if FOREGROUND in (meta.get("finalizers") or []) and not self._dependents(meta["uid"]):
                rt = self.registry.preferred(key[0], key[1])
                if rt is None:
                    continue
                new = copy.deepcopy(obj)
                new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
                self._commit(rt, key, new, obj)
                if not new["metadata"]["finalizers"]:
                    self._remove(key)
