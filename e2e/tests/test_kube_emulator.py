"""The emulator seen through the real kubectl and plain HTTP: apply/unchanged/
configured, get and list with selectors, CRDs and their validation, metadata,
the status subresource, PATCH types, watches and garbage collection."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp.web
import httpx
import pytest
import yaml

from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.emulator import Emulator
from rocketcluster.e2e.kube.harness import HarnessError, KubeHarness

REPO = Path(__file__).resolve().parents[2]

CRD = textwrap.dedent("""\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: widgets.example.com}
    spec:
      group: example.com
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
      versions:
      - name: v1
        served: true
        storage: true
        subresources: {status: {}}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                required: [size]
                properties:
                  size: {type: integer, minimum: 1}
                  colour: {type: string, enum: [red, blue], default: red}
              status: {type: object, x-kubernetes-preserve-unknown-fields: true}
    """)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[KubeHarness]:
    with KubeHarness(tmp_path_factory.mktemp("emulator"), realise=False) as harness:
        yield harness


def _apply(kube: KubeHarness, text: str, *extra: str) -> str:
    return kube.kubectl("apply", *extra, "-f", "-", input=text).stdout.strip()


def test_apply_unchanged_configured_get_and_delete(kube: KubeHarness) -> None:
    manifest = textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: shop, labels: {app: shop}}
        spec:
          replicas: 1
          selector: {matchLabels: {app: shop}}
          template:
            metadata: {labels: {app: shop}}
            spec:
              containers:
              - {name: app, image: shop:1, command: [serve], env: [{name: A, value: "1"}]}
        """)
    assert _apply(kube, manifest) == "deployment.apps/shop created"
    assert _apply(kube, manifest) == "deployment.apps/shop unchanged"
    edited = manifest.replace("shop:1", "shop:2")
    assert _apply(kube, edited) == "deployment.apps/shop configured"
    stored = kube.get("deployments", "default", "shop")
    assert stored is not None
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    # a strategic merge of one field kept the rest of the container
    assert container["image"] == "shop:2" and container["command"] == ["serve"]
    assert stored["metadata"]["generation"] == 2
    out = kube.kubectl("get", "deployment", "shop", "-o", "json").stdout
    assert json.loads(out)["metadata"]["uid"] == stored["metadata"]["uid"]
    assert "shop" in kube.kubectl("get", "deployments").stdout
    assert "deleted" in kube.kubectl("delete", "-f", "-", input=edited).stdout
    assert kube.get("deployments", "default", "shop") is None


def test_list_with_label_selectors(kube: KubeHarness) -> None:
    for name, tier in (("a", "web"), ("b", "db"), ("c", "web")):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"sel-{name}",
                    "namespace": "default",
                    "labels": {"tier": tier, "set": "sel"},
                },
            }
        )
    out = kube.kubectl("get", "configmaps", "-l", "tier=web,set=sel", "-o", "name").stdout
    assert out.split() == ["configmap/sel-a", "configmap/sel-c"]
    names = [
        o["metadata"]["name"]
        for o in kube.list("configmaps", "default", "set=sel,tier notin (web)")
    ]
    assert names == ["sel-b"]
    listing = kube.http.get("/api/v1/namespaces/default/configmaps").json()
    assert listing["kind"] == "ConfigMapList" and listing["apiVersion"] == "v1"
    by_field = kube.http.get("/api/v1/configmaps", params={"fieldSelector": "metadata.name=sel-b"})
    assert [o["metadata"]["name"] for o in by_field.json()["items"]] == ["sel-b"]


def test_crd_then_custom_resources_valid_and_invalid(kube: KubeHarness) -> None:
    assert "created" in _apply(kube, CRD)
    kube.kubectl("wait", "--for=condition=Established", "crd/widgets.example.com")
    good = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 2}\n"
    assert _apply(kube, good) == "widget.example.com/w1 created"
    stored = kube.get("widgets", "default", "w1")
    assert stored is not None and stored["spec"] == {"size": 2, "colour": "red"}  # defaulted
    assert "w1" in kube.kubectl("get", "widgets").stdout
    assert "w1" in kube.kubectl("get", "wd", "w1", "-o", "yaml").stdout

    bad = good.replace("w1", "w2").replace("size: 2", "size: 0, colour: green")
    refused = kube.kubectl("apply", "-f", "-", input=bad, check=False)
    assert refused.returncode != 0
    assert "spec.size: Invalid value: 0" in refused.stderr
    assert 'spec.colour: Unsupported value: "green"' in refused.stderr

    unknown = good.replace("w1", "w3").replace("size: 2", "size: 2, shape: round")
    strict = kube.kubectl("apply", "-f", "-", input=unknown, check=False)
    assert strict.returncode != 0 and 'unknown field "spec.shape"' in strict.stderr
    assert "created" in _apply(kube, unknown, "--validate=false")
    pruned = kube.get("widgets", "default", "w3")
    assert pruned is not None and "shape" not in pruned["spec"]


def test_metadata_generation_and_status_isolation(kube: KubeHarness) -> None:
    _apply(kube, CRD)
    created = kube.create(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "meta", "namespace": "default"},
            "spec": {"size": 1},
            "status": {"phase": "ignored"},
        }
    )
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["namespace"] == "default"
    assert "status" not in created
    status = kube.patch(
        "widgets",
        "default",
        "meta",
        {"spec": {"size": 9}, "status": {"phase": "Ready"}},
        subresource="status",
    )
    assert status["status"] == {"phase": "Ready"} and status["spec"]["size"] == 1
    assert status["metadata"]["generation"] == 1
    assert int(status["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    spec = kube.patch("widgets", "default", "meta", {"spec": {"size": 3}, "status": {"x": 1}})
    assert spec["status"] == {"phase": "Ready"} and spec["metadata"]["generation"] == 2
    labelled = kube.patch("widgets", "default", "meta", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 2


def test_patch_types_put_and_server_side_apply(kube: KubeHarness) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "patches", "namespace": "default"},
            "data": {"a": "1"},
        }
    )
    ops = [{"op": "add", "path": "/data/b", "value": "2"}]
    out = kube.patch(
        "configmaps", "default", "patches", ops, content_type="application/json-patch+json"
    )
    assert out["data"] == {"a": "1", "b": "2"}
    out["data"] = {"c": "3"}
    put = kube.http.put("/api/v1/namespaces/default/configmaps/patches", json=out).json()
    assert put["data"] == {"c": "3"}
    stale = kube.http.put("/api/v1/namespaces/default/configmaps/patches", json=out)
    assert stale.status_code == 409
    applied = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": "default"},
            "data": {"x": "1"},
        }
    )
    response = kube.http.patch(
        "/api/v1/namespaces/default/configmaps/applied",
        params={"fieldManager": "test", "force": "true"},
        content=applied,
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert response.status_code in (200, 201) and response.json()["data"] == {"x": "1"}


def test_watch_resumes_from_a_resource_version(kube: KubeHarness) -> None:
    listing = kube.http.get("/api/v1/namespaces/default/configmaps").json()
    since = listing["metadata"]["resourceVersion"]
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "watched", "namespace": "default", "labels": {"w": "1"}},
        }
    )
    kube.patch("configmaps", "default", "watched", {"metadata": {"labels": {"w": "2"}}})
    params = {
        "watch": "true",
        "resourceVersion": since,
        "timeoutSeconds": "1",
        "labelSelector": "w=1",
    }
    with kube.http.stream(  # the harness's client: the admin's token
        "GET", "/api/v1/namespaces/default/configmaps", params=params, timeout=30
    ) as stream:
        events = [json.loads(line) for line in stream.iter_lines() if line.strip()]
    kinds = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    # the label change took it out of the selection: reported as DELETED
    assert kinds == [("ADDED", "watched"), ("DELETED", "watched")]


def _owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    meta = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
    ]


def test_garbage_collection_cascades_unless_orphaned(kube: KubeHarness) -> None:
    def configmap(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": "default"}
        if owner is not None:
            meta["ownerReferences"] = _owned_by(owner)
        return kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})

    root = configmap("gc-root")
    child = configmap("gc-child", root)
    configmap("gc-grandchild", child)
    kube.kubectl("delete", "configmap", "gc-root")
    kube.wait_for(
        lambda: kube.get("configmaps", "default", "gc-grandchild") is None,
        30,
        "the grandchild to be collected",
    )
    assert kube.get("configmaps", "default", "gc-child") is None

    root = configmap("gc-root2")
    configmap("gc-kept", root)
    kube.kubectl("delete", "configmap", "gc-root2", "--cascade=orphan")

    def orphaned() -> dict[str, Any] | None:
        kept = kube.get("configmaps", "default", "gc-kept")
        return kept if kept is not None and "ownerReferences" not in kept["metadata"] else None

    kept = kube.wait_for(orphaned, 30, "the dependent to be orphaned")
    assert kept["metadata"]["name"] == "gc-kept"


def test_namespaces_pods_by_label_and_errors(kube: KubeHarness) -> None:
    # kubectl's imperative ``create <kind>`` sends protobuf, which the emulator
    # answers as a real server answers a body it cannot decode
    refused = kube.kubectl("create", "namespace", "team", check=False)
    assert refused.returncode != 0 and "UnsupportedMediaType" in refused.stderr
    _apply(kube, "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "team", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]},
    }
    kube.create(pod)
    out = kube.kubectl("get", "pods", "-n", "team", "-l", "app=x", "-o", "name").stdout
    assert out.split() == ["pod/p1"]
    missing = kube.kubectl("get", "pod", "nope", "-n", "team", check=False)
    assert missing.returncode != 0 and 'pods "nope" not found' in missing.stderr
    with pytest.raises(HarnessError):
        kube.kubectl("get", "pod", "nope", "-n", "team")
    kube.kubectl("delete", "namespace", "team")
    assert kube.get("pods", "team", "p1") is None


async def test_an_in_process_emulator_answers_from_its_registry() -> None:
    """The Emulator alone (none of serve()'s wiring): a CRD is discoverable at ``/``
    as soon as it is stored, and strategic merge is refused for custom resources
    only — the CRD's and the Prometheus operator's — as a real server does."""
    emulator = Emulator()
    server = aiohttp.web.Server(emulator)
    async with emulator:
        listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        try:
            async with httpx.AsyncClient(base_url=url, trust_env=False) as http:

                async def paths() -> set[str]:
                    return set((await http.get("/")).json()["paths"])

                async def create(path: str, obj: dict[str, Any]) -> None:
                    (await http.post(path, json=obj)).raise_for_status()

                async def strategic(path: str, patch: dict[str, Any]) -> int:
                    kind = {"Content-Type": "application/strategic-merge-patch+json"}
                    answer = await http.patch(path, content=json.dumps(patch), headers=kind)
                    return answer.status_code

                before = await paths()
                assert {"/api", "/api/v1", "/apis", "/apis/apps/v1"} <= before
                assert "/apis/example.com/v1" not in before
                crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
                await create(crds, yaml.safe_load(CRD))
                assert {"/apis/example.com", "/apis/example.com/v1"} <= await paths()

                widgets = "/apis/example.com/v1/namespaces/default/widgets"
                await create(
                    widgets, {"kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}
                )
                assert await strategic(f"{widgets}/w", {"spec": {"size": 2}}) == 415
                monitors = "/apis/monitoring.coreos.com/v1/namespaces/default/servicemonitors"
                await create(monitors, {"kind": "ServiceMonitor", "metadata": {"name": "m"}})
                assert await strategic(f"{monitors}/m", {"spec": {"jobLabel": "x"}}) == 415
                configmaps = "/api/v1/namespaces/default/configmaps"
                await create(configmaps, {"kind": "ConfigMap", "metadata": {"name": "c"}})
                assert await strategic(f"{configmaps}/c", {"data": {"k": "v"}}) == 200
        finally:
            listener.close()
            await server.shutdown(1.0)
