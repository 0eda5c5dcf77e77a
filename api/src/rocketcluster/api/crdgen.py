"""CustomResourceDefinitions generated from the pydantic models (committed twice, the
same files in ``crds/`` for ``kubectl apply`` and in the Helm chart's ``crds/``; CI
fails when either copy is stale).

The models are the one source of truth; this turns their JSON schema into the
*structural* OpenAPI v3 schema Kubernetes requires: no ``$ref`` (definitions are
inlined), no ``anyOf`` with null (``nullable``), no ``additionalProperties: false``
(the API server prunes or, with strict field validation, refuses unknown fields),
every default written out — including those of nested models made by a default
factory — so the API server fills in what the operator will assume, and the
cross-field rules as CEL ``x-kubernetes-validations``.

``python -m rocketcluster.api.crdgen [--check] [--out DIR ...]``
"""

from __future__ import annotations

import argparse
import copy
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rocketcluster.api.catalogue import RocketConsumerGroup, RocketTopic
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.kube import GROUP, VERSION
from rocketcluster.api.status import CatalogueStatus, RocketClusterStatus
from rocketcluster.api.user_resource import RocketUser, UserStatus

REPO_ROOT = Path(__file__).resolve().parents[4]
CRD_DIR = REPO_ROOT / "crds"
# Helm installs a chart's crds/ before its templates (and never upgrades them).
CHART_CRD_DIR = REPO_ROOT / "charts" / "rocketcluster-operator" / "crds"
CRD_DIRS = (CRD_DIR, CHART_CRD_DIR)

_DROP = {"title", "additionalProperties", "$defs", "discriminator"}
CATEGORY = "rocket"


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    model: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[dict[str, Any], ...]
    description: str

    @property
    def filename(self) -> str:
        return f"{GROUP}_{self.plural}.yaml"


def _age() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _ready() -> dict[str, Any]:
    return {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    }


RESOURCES: tuple[Resource, ...] = (
    Resource(
        kind="RocketCluster",
        plural="rocketclusters",
        short_names=("rkc",),
        model=RocketCluster,
        status=RocketClusterStatus,
        columns=(
            _ready(),
            {"name": "Masters", "type": "string", "jsonPath": ".status.masters"},
            {"name": "Groups", "type": "integer", "jsonPath": ".spec.brokers.groups"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.brokers.replicas"},
            {
                "name": "Operation",
                "type": "string",
                "jsonPath": ".status.operation",
                "priority": 1,
            },
            _age(),
        ),
        description="A RocketMQ-style messaging cluster: controllers and broker groups.",
    ),
    Resource(
        kind="RocketTopic",
        plural="rockettopics",
        short_names=("rkt",),
        model=RocketTopic,
        status=CatalogueStatus,
        columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Topic", "type": "string", "jsonPath": ".status.name"},
            {"name": "Queues", "type": "integer", "jsonPath": ".spec.queues"},
            {"name": "Type", "type": "string", "jsonPath": ".spec.messageType"},
            _ready(),
            _age(),
        ),
        description="A topic of a RocketCluster, managed as a resource.",
    ),
    Resource(
        kind="RocketConsumerGroup",
        plural="rocketconsumergroups",
        short_names=("rkg",),
        model=RocketConsumerGroup,
        status=CatalogueStatus,
        columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Group", "type": "string", "jsonPath": ".status.name"},
            {"name": "FIFO", "type": "boolean", "jsonPath": ".spec.fifo"},
            _ready(),
            _age(),
        ),
        description="A consumer group of a RocketCluster, managed as a resource.",
    ),
    Resource(
        kind="RocketUser",
        plural="rocketusers",
        short_names=("rku",),
        model=RocketUser,
        status=UserStatus,
        columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "User", "type": "string", "jsonPath": ".status.name"},
            {"name": "Admin", "type": "boolean", "jsonPath": ".spec.admin"},
            {"name": "Secret", "type": "string", "jsonPath": ".status.secretName"},
            _ready(),
            _age(),
        ),
        description="A user of a RocketCluster (access key, permissions), managed as a "
        "resource; its keys are in the Secret named in its status.",
    ),
)


# -- defaults made by factories --------------------------------------------------------


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """``root`` and every model reachable from its fields."""
    seen: set[type[BaseModel]] = set()
    stack = [root]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for field in model.model_fields.values():
            stack.extend(_nested(field.annotation))


def _nested(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _nested(arg)


def _factory_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Field alias -> the JSON of the default its factory makes."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        factory = field.default_factory
        if factory is None or field.default is not PydanticUndefined:
            continue
        value = factory()  # type: ignore[call-arg]
        alias = field.alias or name
        if isinstance(value, BaseModel):
            out[alias] = value.model_dump(mode="json", by_alias=True, exclude_none=True)
        else:
            out[alias] = value
    return out


# -- JSON schema -> structural schema ----------------------------------------------------


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (see the module docstring)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    defaults = {m.__name__: _factory_defaults(m) for m in _models(model)}
    return _convert(raw, defs, defaults, model.__name__)


def _convert(
    node: dict[str, Any], defs: dict[str, Any], defaults: dict[str, dict[str, Any]], name: str
) -> dict[str, Any]:
    if "$ref" in node:
        ref = node["$ref"].rsplit("/", 1)[-1]
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _convert({**defs[ref], **extra}, defs, defaults, ref)
    any_of = node.get("anyOf")
    if any_of is not None:
        options = [o for o in any_of if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if sorted(o.get("type", "") for o in options) == ["integer", "string"]:
            # A number or a word (``frontProcesses: auto | 2``): Kubernetes' one union.
            out = {k: v for k, v in rest.items() if k not in _DROP}
            out["x-kubernetes-int-or-string"] = True
            out["anyOf"] = [
                {k: v for k, v in _convert(o, defs, defaults, name).items() if k != "default"}
                for o in options
            ]
            return out
        if len(options) != 1:
            raise ValueError(f"{name}: unions other than X | None are not structural")
        out = _convert({**options[0], **rest}, defs, defaults, name)
        if len(options) != len(any_of):
            out["nullable"] = True
            if out.get("default", 0) is None:
                del out["default"]
        return out
    out = {k: v for k, v in node.items() if k not in _DROP}
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if "exclusiveMinimum" in out and not isinstance(out["exclusiveMinimum"], bool):
        out["minimum"] = out["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "enum" in out and "type" not in out:
        out["type"] = "string" if all(isinstance(v, str) for v in out["enum"]) else "integer"
    properties = node.get("properties")
    if properties is not None:
        factory = defaults.get(name, {})
        out["type"] = "object"
        out["properties"] = {}
        for key, prop in properties.items():
            converted = _convert(prop, defs, defaults, f"{name}.{key}")
            if key in factory and "default" not in converted:
                converted["default"] = factory[key]
            out["properties"][key] = converted
    elif node.get("type") == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            out["additionalProperties"] = _convert(values, defs, defaults, name)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        out["items"] = _convert(node["items"], defs, defaults, name)
    if "type" not in out:
        raise ValueError(f"{name}: no type in {node}")
    if "description" in out:
        out["description"] = " ".join(out["description"].replace("``", "").split())
    first = ("type", "description")
    return {k: out[k] for k in first if k in out} | {k: v for k, v in out.items() if k not in first}


def custom_resource_definition(resource: Resource) -> dict[str, Any]:
    spec_field = resource.model.model_fields["spec"].annotation
    assert isinstance(spec_field, type) and issubclass(spec_field, BaseModel)
    spec = structural(spec_field)
    spec["description"] = spec.get("description") or f"The desired {resource.kind}."
    status = structural(resource.status)
    status["description"] = "What the operator observed, written by it alone."
    schema = {
        "type": "object",
        "description": resource.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{resource.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "rocketcluster"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "shortNames": list(resource.short_names),
                # ``kubectl get rocket`` lists all three. kubectl expands categories
                # before it resolves names, so a category must never be a kind's name
                # (``rocketcluster`` would turn ``kubectl get rocketcluster prod`` into
                # a query of all three kinds, refused as "only one resource").
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": list(resource.columns),
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block YAML without anchors: each CRD reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_files() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    header = "# Generated from the rocketcluster.api models: python -m rocketcluster.api.crdgen\n"
    return {
        r.filename: header
        + yaml.dump(custom_resource_definition(r), Dumper=_Dumper, sort_keys=False, width=100)
        for r in RESOURCES
    }


def schema_of(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of ``kind`` (for validating custom resources in tests)."""
    for resource in RESOURCES:
        if resource.kind == kind:
            crd = custom_resource_definition(resource)
            schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"no custom resource {kind!r}")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A structural schema as a strict API server applies it, as plain JSON schema (for
    validating custom resources in tests): unknown fields refused
    (``fieldValidation=Strict``, kubectl's default), ``nullable`` honoured, the
    Kubernetes extensions (CEL rules, list types) left out — check those apart; an
    OpenAPI ``exclusiveMinimum: true`` beside ``minimum`` becomes JSON schema's
    numeric ``exclusiveMinimum`` (read as a number, ``true`` would be 1)."""
    out = copy.deepcopy(schema)
    for key in ("x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys"):
        out.pop(key, None)
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True:
            out[exclusive] = out.pop(bound)
        elif out.get(exclusive) is False:
            del out[exclusive]
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {k: strict_schema(v) for k, v in out["properties"].items()}
        if not out.pop("x-kubernetes-preserve-unknown-fields", False):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_schema(out["additionalProperties"])
    if "items" in out:
        out["items"] = strict_schema(out["items"])
    return out


def write(directory: Path) -> list[Path]:
    """Write every CRD into ``directory`` and remove ours that no kind makes any more."""
    directory.mkdir(parents=True, exist_ok=True)
    files = render_files()
    for leftover in directory.glob(f"{GROUP}_*.yaml"):
        if leftover.name not in files:
            leftover.unlink()
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def stale_files(directory: Path) -> list[str]:
    """The files of ``directory`` that differ from freshly generated ones: changed,
    missing, or left over from a kind that is gone (sorted; empty when current)."""
    fresh = render_files()
    present = {p.name: p.read_text() for p in sorted(directory.glob("*.yaml"))}
    return sorted(n for n in fresh.keys() | present.keys() if fresh.get(n) != present.get(n))


def check(directories: tuple[Path, ...] | list[Path]) -> list[str]:
    """One line per stale directory, naming its stale files (empty when all current)."""
    problems = []
    for directory in directories:
        stale = stale_files(directory)
        if stale:
            problems.append(f"{directory} is stale ({', '.join(stale)})")
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Generate the CRDs from the API models into crds/ and the Helm chart."
    )
    parser.add_argument("--check", action="store_true", help="fail if any copy is stale")
    parser.add_argument(
        "--out",
        type=Path,
        action="append",
        help=f"a directory to write (repeatable); default: {', '.join(map(str, CRD_DIRS))}",
    )
    args = parser.parse_args(argv)
    directories: list[Path] = args.out or list(CRD_DIRS)
    if not args.check:
        for directory in directories:
            for path in write(directory):
                print(f"generated {path}")
        return
    problems = check(directories)
    if problems:
        sys.exit("\n".join(problems) + "\nrun: python -m rocketcluster.api.crdgen")
    print("CRDs are current")


if __name__ == "__main__":
    main()
