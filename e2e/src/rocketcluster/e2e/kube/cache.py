"""What the realiser knows of the cluster: an informer-style cache fed by list+watch,
and by the answers to its own writes (so a controller never acts twice on an object
it has just created because the watch event has not arrived yet).

An object is replaced only by a newer ``resourceVersion``; a DELETED event leaves a
tombstone version so a late write answer cannot bring the object back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rocketcluster.e2e.kube.client import KubeClient, KubeError, WatchExpired
from rocketcluster.e2e.kube.resources import ResourceType

log = logging.getLogger("rocketcluster.realiser.cache")

ObjKey = tuple[str, str, str]  # plural, namespace, name


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Cache:
    def __init__(self) -> None:
        self._objects: dict[ObjKey, dict[str, Any]] = {}
        self._versions: dict[ObjKey, int] = {}  # also of deleted objects
        self.changed = asyncio.Event()
        self.synced: set[str] = set()  # plurals listed at least once

    @staticmethod
    def key(plural: str, obj: dict[str, Any]) -> ObjKey:
        meta = obj.get("metadata", {})
        return (plural, meta.get("namespace") or "", meta.get("name", ""))

    def put(self, plural: str, obj: dict[str, Any]) -> None:
        key = self.key(plural, obj)
        known = self._versions.get(key)
        if known is not None and (
            _rv(obj) < known or (key not in self._objects and _rv(obj) <= known)
        ):
            return  # older, or the deleted object itself
        self._versions[key] = _rv(obj)
        self._objects[key] = obj
        self.changed.set()

    def remove(self, plural: str, obj: dict[str, Any]) -> None:
        key = self.key(plural, obj)
        if _rv(obj) < self._versions.get(key, 0):
            return
        self._versions[key] = _rv(obj)
        if self._objects.pop(key, None) is not None:
            self.changed.set()

    def replace_all(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A fresh list: what it does not hold is gone."""
        fresh = {self.key(plural, obj): obj for obj in items}
        for key in [k for k in self._objects if k[0] == plural and k not in fresh]:
            del self._objects[key]
        for obj in items:
            self.put(plural, obj)
        self.synced.add(plural)
        self.changed.set()

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((plural, namespace, name))

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            obj
            for (p, ns, _), obj in sorted(self._objects.items())
            if p == plural and (namespace is None or ns == namespace)
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
