"""The three PATCH languages, including the directives kubectl's three-way diff sends."""

from __future__ import annotations

from typing import Any

import pytest

from rocketcluster.e2e.kube.patches import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

POD_SPEC: dict[str, Any] = {
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "a:1",
                "command": ["serve"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80, "name": "http"}],
            },
            {"name": "sidecar", "image": "s:1"},
        ],
        "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
    },
    "metadata": {"finalizers": ["a"]},
}


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists() -> None:
    out = merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]})
    assert out == {"a": {"c": 2, "d": 3}, "l": [3]}


def test_strategic_merge_updates_one_container_by_name_and_keeps_the_rest() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"name": "app", "image": "a:2", "env": [{"name": "B", "value": "3"}]}],
        }
    }
    out = strategic_merge_patch(POD_SPEC, patch)
    app, sidecar = out["spec"]["containers"]
    assert app["image"] == "a:2" and app["command"] == ["serve"]
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert sidecar == {"name": "sidecar", "image": "s:1"}
    assert POD_SPEC["spec"]["containers"][0]["image"] == "a:1"  # arguments untouched


def test_strategic_merge_directives() -> None:
    patch = {
        "spec": {
            "containers": [{"name": "sidecar", "$patch": "delete"}],
            "volumes": [{"$patch": "replace"}, {"name": "data", "emptyDir": {}}],
            "$setElementOrder/volumes": [{"name": "data"}],
        },
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
    }
    out = strategic_merge_patch(POD_SPEC, patch)
    assert [c["name"] for c in out["spec"]["containers"]] == ["app"]
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert out["metadata"]["finalizers"] == ["b"]


def test_strategic_merge_ports_key_by_context() -> None:
    svc = {"spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}]}}
    out = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 81, "targetPort": 9}]}})
    assert out["spec"]["ports"] == [
        {"port": 80, "name": "a"},
        {"port": 81, "name": "b", "targetPort": 9},
    ]
    added = strategic_merge_patch(
        POD_SPEC, {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 81}]}]}}
    )
    assert [p["containerPort"] for p in added["spec"]["containers"][0]["ports"]] == [80, 81]


def test_json_patch_operations_and_failed_test() -> None:
    doc = {"metadata": {"finalizers": ["a", "b"]}, "spec": {"x": 1}}
    out = json_patch(
        doc,
        [
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
            {"op": "replace", "path": "/spec/x", "value": 2},
            {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
            {"op": "move", "from": "/spec/y", "path": "/spec/z"},
            {"op": "test", "path": "/spec/z", "value": 2},
        ],
    )
    assert out == {"metadata": {"finalizers": ["b", "c"]}, "spec": {"x": 2, "z": 2}}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/spec/x", "value": 5}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
