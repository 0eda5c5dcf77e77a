"""What the realiser knows of the cluster: an informer-style cache fed by list+watch,
and by the answers to its own writes (so a controller never acts twice on an object
it has just created because the watch event has not arrived yet).

An object is replaced only by a newer ``resourceVersion`` (so the watch's echo of
the realiser's own write, already cached from the write's answer, changes nothing);
a DELETED event leaves a tombstone version so a late write answer cannot bring the
object back. Objects are held per plural, and each plural counts its changes, so a
reader can tell cheaply whether anything of a kind changed since it last looked.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from typing import Any

from rocketcluster.e2e.kube.client import KubeClient, KubeError, WatchExpired
from rocketcluster.e2e.kube.resources import ResourceType

log = logging.getLogger("rocketcluster.realiser.cache")

ObjKey = tuple[str, str]  # namespace ("" if cluster-scoped), name


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Cache:
    def __init__(self) -> None:
        # each by plural; versions also of deleted objects
        self._objects: defaultdict[str, dict[ObjKey, dict[str, Any]]] = defaultdict(dict)
        self._versions: defaultdict[str, dict[ObjKey, int]] = defaultdict(dict)
        self._changes: Counter[str] = Counter()
        self.changed = asyncio.Event()
        self.synced: set[str] = set()  # plurals listed at least once

    @staticmethod
    def key(obj: dict[str, Any]) -> ObjKey:
        meta = obj.get("metadata", {})
        return (meta.get("namespace") or "", meta.get("name", ""))

    def _changed(self, plural: str) -> None:
        self._changes[plural] += 1
        self.changed.set()

    def changes(self, plural: str) -> int:
        """How many times objects of ``plural`` changed: compare two answers to know
        whether anything of that kind changed in between."""
        return self._changes[plural]

    def put(self, plural: str, obj: dict[str, Any]) -> None:
        key = self.key(obj)
        known = self._versions[plural].get(key)
        if known is not None and _rv(obj) <= known:
            return  # older, the same (a write's watch echo), or the deleted object itself
        self._versions[plural][key] = _rv(obj)
        self._objects[plural][key] = obj
        self._changed(plural)

    def remove(self, plural: str, obj: dict[str, Any]) -> None:
        key = self.key(obj)
        if _rv(obj) < self._versions[plural].get(key, 0):
            return
        self._versions[plural][key] = _rv(obj)
        if self._objects[plural].pop(key, None) is not None:
            self._changed(plural)

    def replace_all(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A fresh list: what it does not hold is gone."""
        fresh = {self.key(obj) for obj in items}
        objects = self._objects[plural]
        for key in [k for k in objects if k not in fresh]:
            del objects[key]
        for obj in items:
            self.put(plural, obj)
        self.synced.add(plural)
        self._changed(plural)

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects[plural].get((namespace, name))

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The objects of one plural (of one namespace), by namespace and name."""
        return [
            obj
            for (ns, _), obj in sorted(self._objects[plural].items())
            if namespace is None or ns == namespace
        ]


async def run_informer(client: KubeClient, cache: Cache, rt: ResourceType) -> None:
    """List, then watch from the list's version; list again when the watch ends
    badly. Runs until cancelled."""
    while True:
        try:
            items, version = await client.list(rt)
            cache.replace_all(rt.plural, items)
            while True:
                async for event in client.watch(rt, version):
                    obj = event.get("object") or {}
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        cache.put(rt.plural, obj)
                    elif event["type"] == "DELETED":
                        cache.remove(rt.plural, obj)
        except asyncio.CancelledError:
            raise
        except WatchExpired:
            continue
        except (KubeError, OSError, ValueError) as exc:
            log.warning("watch of %s failed (%s); listing again", rt.plural, exc)
        except Exception as exc:  # httpx transport errors and the like
            log.warning("watch of %s broke (%r); listing again", rt.plural, exc)
        await asyncio.sleep(0.5)
