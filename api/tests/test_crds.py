"""The CRDs: generated from the models and current, structural, valid CRD objects
for the Kubernetes versions we support, and in agreement with the models on every
example manifest — the valid ones accepted, the invalid ones refused by both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from rocketcluster.api.catalogue import RocketConsumerGroup, RocketTopic
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.crdgen import (
    CRD_DIR,
    CRD_DIRS,
    RESOURCES,
    check,
    custom_resource_definition,
    main,
    render_files,
)
from rocketcluster.api.user_resource import RocketUser
from rocketcluster.e2e.crd_check import crd_problems, with_defaults

REPO = Path(__file__).resolve().parents[2]
INVALID = Path(__file__).parent / "manifests" / "invalid"
MODELS: dict[str, Any] = {
    "RocketCluster": RocketCluster,
    "RocketTopic": RocketTopic,
    "RocketConsumerGroup": RocketConsumerGroup,
    "RocketUser": RocketUser,
}
OLDEST, NEWEST = "1.27.0", "1.37.0"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("directory", CRD_DIRS, ids=lambda d: str(d.relative_to(REPO)))
def test_committed_crds_are_current(directory: Path) -> None:
    """Both copies: crds/ (kubectl apply) and the Helm chart's crds/."""
    fresh = render_files()
    present = {p.name: p.read_text() for p in directory.glob("*.yaml")}
    assert present == fresh, f"{directory} is stale: run python -m rocketcluster.api.crdgen"


def test_check_fails_when_either_copy_is_stale(tmp_path: Path) -> None:
    first, second = tmp_path / "crds", tmp_path / "chart-crds"
    main(["--out", str(first), "--out", str(second)])
    main(["--check", "--out", str(first), "--out", str(second)])  # current: no exit
    stale = second / RESOURCES[0].filename
    stale.write_text(stale.read_text().replace("RocketCluster", "RocketClustr", 1))
    (first / "rocketcluster.io_gone.yaml").write_text("kind: CustomResourceDefinition\n")
    with pytest.raises(SystemExit) as exited:
        main(["--check", "--out", str(first), "--out", str(second)])
    message = str(exited.value.code)
    assert f"{first} is stale (rocketcluster.io_gone.yaml)" in message
    assert f"{second} is stale ({RESOURCES[0].filename})" in message
    main(["--out", str(first), "--out", str(second)])  # writing mends both
    assert check([first, second]) == []


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind)
def test_crds_are_valid_crd_objects(resource: Any, version: str) -> None:
    kubernetes_validate.validate(custom_resource_definition(resource), version, strict=True)


def test_no_category_shadows_a_name() -> None:
    """kubectl expands a category before resolving a name: a category equal to a
    kind's plural, singular or short name would make ``kubectl get <it> NAME`` ask
    for every kind in the category."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]
    names = {
        n
        for crd in crds
        for n in (
            crd["spec"]["names"]["plural"],
            crd["spec"]["names"]["singular"],
            *crd["spec"]["names"].get("shortNames", []),
        )
    }
    categories = {c for crd in crds for c in crd["spec"]["names"].get("categories", [])}
    assert categories and not categories & names


def test_crd_schemas_are_structural() -> None:
    """Every node has a type; no $ref, anyOf or additionalProperties: false — but for
    Kubernetes' one union, x-kubernetes-int-or-string, whose anyOf is an integer or a
    string and nothing more."""

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            assert sorted(o["type"] for o in node["anyOf"]) == ["integer", "string"], path
            assert all(not {"properties", "items", "anyOf"} & o.keys() for o in node["anyOf"])
            return
        assert "type" in node, f"{path} has no type"
        assert not {"$ref", "anyOf", "oneOf", "allOf"} & node.keys(), path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    for resource in RESOURCES:
        crd = custom_resource_definition(resource)
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], resource.kind)


def test_defaults_of_nested_models_are_written_out() -> None:
    """The API server fills in what the models would: the controller's volume is 1Gi,
    not the broker volume's 10Gi default."""
    schema = custom_resource_definition(RESOURCES[0])["spec"]["versions"][0]["schema"]
    spec = schema["openAPIV3Schema"]["properties"]["spec"]
    defaulted = with_defaults(spec, {})
    model = RocketCluster.model_validate({"metadata": {"name": "x"}})
    assert defaulted["controller"] == model.spec.controller.model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert defaulted["brokers"]["storage"]["size"] == "10Gi"
    assert defaulted["controller"]["storage"]["size"] == "1Gi"


EXAMPLES = sorted(
    (path, i) for path in (REPO / "examples").glob("*.yaml") for i, _ in enumerate(_documents(path))
)


@pytest.mark.parametrize(("path", "index"), EXAMPLES, ids=lambda v: getattr(v, "name", str(v)))
def test_every_example_is_accepted_by_crd_and_model(path: Path, index: int) -> None:
    obj = _documents(path)[index]
    assert crd_problems(obj) == []
    MODELS[obj["kind"]].model_validate(obj)


@pytest.mark.parametrize("path", sorted(INVALID.glob("*.yaml")), ids=lambda p: p.name)
def test_invalid_manifests_are_refused_by_crd_and_model(path: Path) -> None:
    (obj,) = _documents(path)
    assert crd_problems(obj), f"the CRD accepted {path.name}"
    with pytest.raises(ValidationError):
        MODELS[obj["kind"]].model_validate(obj)


def test_the_validator_names_the_field() -> None:
    problems = crd_problems(_documents(INVALID / "unknown-field.yaml")[0])
    assert any("replica" in p for p in problems), problems
    problems = crd_problems(_documents(INVALID / "min-in-sync-above-replicas.yaml")[0])
    assert problems == [".spec.brokers: replication.minInSyncReplicas cannot exceed inSyncReplicas"]


def test_a_reserved_canary_topic_is_refused_with_the_reason() -> None:
    problems = crd_problems(_documents(INVALID / "canary-reserved-topic.yaml")[0])
    assert problems == [
        ".spec.canary: canary.topic: names starting with RMQ_SYS_, %RETRY% or %DLQ% are reserved"
    ]
