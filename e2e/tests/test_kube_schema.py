"""Structural schemas: pruning, defaults and validation worded as kube-apiserver does."""

from __future__ import annotations

from typing import Any

from rocketcluster.e2e.kube.schema import apply_defaults, invalid_message, prune, validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "string"},
                "replicas": {"type": "integer", "default": 1, "minimum": 1},
                "mode": {"type": "string", "enum": ["sync", "async"], "default": "sync"},
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "size": {"type": "integer", "default": 4},
                        },
                    },
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_prune_drops_and_names_undeclared_fields() -> None:
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "a", "anything": 1},
        "spec": {
            "image": "i",
            "bogus": 1,
            "extra": {"free": {"x": 1}},
            "labels": {"k": "v"},
            "items": [{"name": "a", "zzz": 1}],
        },
        "top": 1,
    }
    pruned, dropped = prune(SCHEMA, obj)
    assert dropped == ["spec.bogus", "spec.items[0].zzz", "top"]
    assert pruned["spec"]["extra"] == {"free": {"x": 1}}
    assert pruned["metadata"] == obj["metadata"] and "top" not in pruned


def test_defaults_fill_missing_fields_of_present_objects() -> None:
    out = apply_defaults(SCHEMA, {"spec": {"image": "i", "items": [{"name": "a"}]}})
    assert out["spec"]["replicas"] == 1 and out["spec"]["mode"] == "sync"
    assert out["spec"]["items"] == [{"name": "a", "size": 4}]
    assert "status" not in apply_defaults(SCHEMA, {"spec": {"image": "i"}})


def test_validation_errors_read_like_the_api_servers() -> None:
    assert validate(SCHEMA, {"spec": {"image": "i", "port": "http", "note": None}}) == []
    errors = validate(SCHEMA, {"spec": {"replicas": "two", "mode": "fast"}})
    text = [str(e) for e in errors]
    assert "spec.image: Required value" in text
    assert (
        'spec.replicas: Invalid value: "two": spec.replicas in body must be of type integer: "two"'
    ) in text
    assert 'spec.mode: Unsupported value: "fast": supported values: "sync", "async"' in text
    zero = validate(SCHEMA, {"spec": {"image": "i", "replicas": 0}})
    assert [e.field for e in zero] == ["spec.replicas"]
    message = invalid_message("Thing", "example.com", "a", zero)
    assert message.startswith('Thing.example.com "a" is invalid: spec.replicas: Invalid value: 0')
