"""What an API server with our CRDs installed says about an object: the CRD's OpenAPI
schema (strict, as crdgen writes it), then its CEL rules on the object with the
schema's defaults applied, as the API server evaluates them.

Shared by the api tests (the CRDs against every example and invalid manifest, the
console, TLS and tiered specs) — a module of its own because test modules import it
by name: a test importing another test module depends on the order pytest collects
them in.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import jsonschema
from celpy.adapter import json_to_cel

from rocketcluster.api.crdgen import RESOURCES, custom_resource_definition, strict_schema


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Apply the schema's defaults to ``value`` as the API server does before CEL rules
    run."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    out = dict(value)
    for key, sub in schema["properties"].items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = with_defaults(sub, out[key])
    return out


def cel_problems(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    problems = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": json_to_cel(value)}):
            problems.append(f"{path or '<root>'}: {rule['message']}")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += cel_problems(sub, value[key], f"{path}.{key}")
    return problems


def crd_problems(obj: dict[str, Any]) -> list[str]:
    """What an API server with this CRD installed says about ``obj`` (empty: accepted)."""
    resource = next(r for r in RESOURCES if r.kind == obj["kind"])
    crd = custom_resource_definition(resource)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(strict_schema(schema))
    problems = [
        f"{'.'.join(str(p) for p in err.absolute_path)}: {err.message}"
        for err in validator.iter_errors(obj)
    ]
    if problems:
        return problems
    return cel_problems(schema, with_defaults(schema, obj))
