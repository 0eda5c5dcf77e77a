"""The emulated API server's write rules, on the store alone (no HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from rocketcluster.e2e.kube.patches import merge_patch
from rocketcluster.e2e.kube.resources import Registry, ResourceType
from rocketcluster.e2e.kube.store import ApiError, Change, Store

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "default": 3}},
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


class World:
    def __init__(self) -> None:
        self.registry = Registry()
        self.changes: list[Change] = []
        self.store = Store(self.registry, allocate_ip=lambda ns, name: "127.20.0.9")
        self.store.listeners.append(self.changes.append)
        self.create("namespaces", {"metadata": {"name": "ns"}})

    def rt(self, plural: str) -> ResourceType:
        for rt in self.registry:
            if rt.plural == plural:
                return rt
        raise KeyError(plural)

    def create(self, plural: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.store.create(self.rt(plural), "ns", body, **kw)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.store.get(self.rt(plural), "ns", name)

    def patch(self, plural: str, name: str, patch: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.store.update(self.rt(plural), "ns", name, lambda o: merge_patch(o, patch), **kw)

    def exists(self, plural: str, name: str) -> bool:
        try:
            self.get(plural, name)
        except ApiError:
            return False
        return True


@pytest.fixture
def world() -> World:
    return World()


def test_metadata_is_filled_and_generation_tracks_the_spec_only(world: World) -> None:
    sts = world.create("statefulsets", {"metadata": {"name": "web"}, "spec": {"replicas": 1}})
    meta = sts["metadata"]
    assert meta["namespace"] == "ns" and meta["generation"] == 1 and meta["uid"]
    assert meta["creationTimestamp"].endswith("Z")
    rv = int(meta["resourceVersion"])
    labelled = world.patch("statefulsets", "web", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) == rv + 1
    scaled = world.patch("statefulsets", "web", {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2 and scaled["metadata"]["uid"] == meta["uid"]
    same = world.patch("statefulsets", "web", {"spec": {"replicas": 3}})
    assert same["metadata"]["resourceVersion"] == scaled["metadata"]["resourceVersion"]


def test_status_subresource_isolation(world: World) -> None:
    world.create(
        "statefulsets",
        {"metadata": {"name": "web"}, "spec": {"replicas": 1}, "status": {"replicas": 99}},
    )
    assert world.get("statefulsets", "web").get("status") is None  # dropped on create
    world.patch("statefulsets", "web", {"spec": {"replicas": 2}, "status": {"replicas": 5}})
    assert world.get("statefulsets", "web").get("status") is None
    out = world.patch(
        "statefulsets",
        "web",
        {"spec": {"replicas": 7}, "status": {"replicas": 2}},
        subresource="status",
    )
    assert out["status"] == {"replicas": 2} and out["spec"]["replicas"] == 2
    assert out["metadata"]["generation"] == 2


def test_conflicts_names_and_namespaces(world: World) -> None:
    world.create("configmaps", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as exists:
        world.create("configmaps", {"metadata": {"name": "c"}})
    assert exists.value.code == 409 and exists.value.reason == "AlreadyExists"
    with pytest.raises(ApiError) as stale:
        world.patch("configmaps", "c", {"metadata": {"resourceVersion": "1"}, "data": {}})
    assert stale.value.code == 409 and stale.value.reason == "Conflict"
    with pytest.raises(ApiError) as bad:
        world.create("configmaps", {"metadata": {"name": "Upper"}})
    assert bad.value.code == 422
    with pytest.raises(ApiError) as missing_ns:
        world.store.create(world.rt("configmaps"), "nowhere", {"metadata": {"name": "c"}})
    assert missing_ns.value.code == 404
    generated = world.create("configmaps", {"metadata": {"generateName": "gen-"}})
    assert generated["metadata"]["name"].startswith("gen-")
    assert len(generated["metadata"]["name"]) == len("gen-") + 5


def test_immutable_fields_of_built_ins(world: World) -> None:
    world.create(
        "statefulsets", {"metadata": {"name": "web"}, "spec": {"replicas": 1, "serviceName": "a"}}
    )
    with pytest.raises(ApiError) as refused:
        world.patch("statefulsets", "web", {"spec": {"serviceName": "b"}})
    assert refused.value.code == 422 and "Forbidden" in refused.value.message
    svc = world.create("services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    assert svc["spec"]["clusterIP"] == "127.20.0.9"
    assert svc["spec"]["ports"][0]["targetPort"] == 80


def test_finalizers_hold_deletion_until_removed(world: World) -> None:
    world.create(
        "pods",
        {
            "metadata": {"name": "p", "finalizers": ["x/y"]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    )
    deleting = world.store.delete(world.rt("pods"), "ns", "p")
    assert deleting["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError):
        world.patch("pods", "p", {"metadata": {"finalizers": ["x/y", "new"]}})
    world.patch("pods", "p", {"metadata": {"finalizers": None}})
    assert not world.exists("pods", "p")
    assert [c.type for c in world.changes[-3:]] == ["MODIFIED", "MODIFIED", "DELETED"]


def _owned(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": meta["name"],
                "uid": meta["uid"],
            }
        ]
    }


def test_garbage_collection_cascades_and_orphan_keeps_dependents(world: World) -> None:
    owner = world.create("statefulsets", {"metadata": {"name": "web"}, "spec": {}})
    pod = world.create(
        "pods",
        {"metadata": {"name": "web-0", **_owned(owner)}, "spec": {"containers": [{"name": "c"}]}},
    )
    world.create("configmaps", {"metadata": {"name": "grandchild", **_owned(pod)}})
    world.store.delete(world.rt("statefulsets"), "ns", "web")
    assert world.exists("pods", "web-0")  # background: after the owner, asynchronously
    world.store.collect_garbage()
    assert not world.exists("pods", "web-0") and not world.exists("configmaps", "grandchild")

    owner = world.create("statefulsets", {"metadata": {"name": "db"}, "spec": {}})
    world.create(
        "pods",
        {"metadata": {"name": "db-0", **_owned(owner)}, "spec": {"containers": [{"name": "c"}]}},
    )
    world.store.delete(world.rt("statefulsets"), "ns", "db", propagation="Orphan")
    world.store.collect_garbage()
    assert "ownerReferences" not in world.get("pods", "db-0")["metadata"]


def test_foreground_deletion_waits_for_dependents(world: World) -> None:
    owner = world.create("deployments", {"metadata": {"name": "d"}, "spec": {}})
    world.create(
        "pods",
        {
            "metadata": {"name": "d-1", "finalizers": ["hold"], **_owned(owner)},
            "spec": {"containers": [{"name": "c"}]},
        },
    )
    world.store.delete(world.rt("deployments"), "ns", "d", propagation="Foreground")
    world.store.collect_garbage()
    assert world.get("deployments", "d")["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert world.get("pods", "d-1")["metadata"]["deletionTimestamp"]
    world.patch("pods", "d-1", {"metadata": {"finalizers": None}})
    world.store.collect_garbage()
    assert not world.exists("deployments", "d")


def test_namespace_deletion_empties_it_first(world: World) -> None:
    world.create("configmaps", {"metadata": {"name": "c"}})
    world.create(
        "pods",
        {
            "metadata": {"name": "p", "finalizers": ["hold"]},
            "spec": {"containers": [{"name": "c"}]},
        },
    )
    ns_type = world.rt("namespaces")
    world.store.delete(ns_type, None, "ns")
    assert world.store.get(ns_type, None, "ns")["status"]["phase"] == "Terminating"
    assert not world.exists("configmaps", "c")
    with pytest.raises(ApiError) as refused:
        world.create("configmaps", {"metadata": {"name": "late"}})
    assert refused.value.code == 403
    world.patch("pods", "p", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiError):
        world.store.get(ns_type, None, "ns")


def test_crd_serves_validates_defaults_and_goes_with_its_objects(world: World) -> None:
    world.store.create(world.rt("customresourcedefinitions"), None, CRD)
    widgets = world.registry.get("example.com", "v1", "widgets")
    assert widgets is not None and widgets.has_status and widgets.short_names == ("wd",)
    created = world.store.create(widgets, "ns", {"metadata": {"name": "w"}, "spec": {}, "bogus": 1})
    assert created["spec"] == {"size": 3} and "bogus" not in created
    with pytest.raises(ApiError) as strict:
        world.store.create(widgets, "ns", {"metadata": {"name": "x"}, "bogus": 1}, strict=True)
    assert strict.value.code == 400 and 'unknown field "bogus"' in strict.value.message
    with pytest.raises(ApiError) as invalid:
        world.store.create(widgets, "ns", {"metadata": {"name": "y"}, "spec": {"size": "big"}})
    assert invalid.value.code == 422 and "spec.size" in invalid.value.message
    causes = invalid.value.details["causes"]
    assert causes[0]["field"] == "spec.size"
    crd = world.store.get(world.rt("customresourcedefinitions"), None, "widgets.example.com")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    world.store.delete(world.rt("customresourcedefinitions"), None, "widgets.example.com")
    assert world.registry.get("example.com", "v1", "widgets") is None
    assert not any(k[1] == "widgets" for k, _ in world.store.items())
