"""What kube-apiserver does with a custom resource's structural schema: prune unknown
fields, apply defaults, validate — in that order — and word the refusal as it does.

Pure functions over the version's ``openAPIV3Schema``:

- :func:`prune` drops fields the schema does not declare (kept under
  ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties``) and names
  them, so a ``fieldValidation=Strict`` request can be refused instead (400, as
  kubectl's default ``--validate=strict`` gets);
- :func:`apply_defaults` fills ``default`` values where the parent object exists;
- :func:`validate` checks types, enums, bounds, patterns and required fields with
  jsonschema, after translating the Kubernetes extensions (``nullable``,
  ``x-kubernetes-int-or-string``) and returns kube-style :class:`FieldError` s.

``x-kubernetes-validations`` (CEL rules) are *not* evaluated: there is no CEL
engine among the member's dependencies, and the operator's own tests check its
rules against the models. ``metadata`` is checked by the server, not the schema.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class FieldError:
    """One entry of a 422 Status's ``details.causes``."""

    field: str
    reason: str  # FieldValueInvalid, FieldValueNotSupported, FieldValueRequired…
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def prune(schema: Mapping[str, Any], obj: Any) -> tuple[Any, list[str]]:
    """The object without undeclared fields, and the paths of the fields dropped."""
    dropped: list[str] = []
    if not isinstance(obj, dict):
        return copy.deepcopy(obj), dropped
    out = {}
    for key, value in obj.items():
        if key in _ROOT_KEPT:
            out[key] = copy.deepcopy(value)
        elif key in (schema.get("properties") or {}):
            out[key] = _prune(schema["properties"][key], value, key, dropped)
        elif schema.get("x-kubernetes-preserve-unknown-fields"):
            out[key] = copy.deepcopy(value)
        else:
            dropped.append(key)
    return out, dropped


def _prune(schema: Mapping[str, Any], value: Any, path: str, dropped: list[str]) -> Any:
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        keep_all = schema.get("x-kubernetes-preserve-unknown-fields", False)
        embedded = schema.get("x-kubernetes-embedded-resource", False)
        if props is None and extra is None and (keep_all or not schema.get("type")):
            return copy.deepcopy(value)
        out = {}
        for key, sub in value.items():
            where = _join(path, key)
            if props is not None and key in props:
                out[key] = _prune(props[key], sub, where, dropped)
            elif isinstance(extra, Mapping):
                out[key] = _prune(extra, sub, where, dropped)
            elif extra is True or keep_all or (embedded and key in _ROOT_KEPT):
                out[key] = copy.deepcopy(sub)
            else:
                dropped.append(where)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(schema["items"], v, _join(path, i), dropped) for i, v in enumerate(value)]
    return copy.deepcopy(value)


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Schema defaults, applied where the enclosing object is present (as the API
    server does, on create, on update and when reading)."""
    if isinstance(value, dict):
        out = dict(value)
        for key, sub in (schema.get("properties") or {}).items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_defaults(sub, out[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            props = schema.get("properties") or {}
            for key, item in list(out.items()):
                if key not in props:
                    out[key] = apply_defaults(extra, item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The structural schema as plain JSON Schema (draft 7)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "default", "example"):
            continue
        if key == "properties":
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(v) for v in value]
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["type"] = ["integer", "string"]
    if schema.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
    return out


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict | list):
        return json.dumps(value)[:80]
    return json.dumps(value)


def _describe(err: jsonschema.ValidationError, field: str) -> list[FieldError]:
    value: Any = err.instance
    rule: Any = err.validator_value
    where = f"{field} in body"
    if err.validator == "required":
        missing = [p for p in rule if isinstance(value, dict) and p not in value]
        return [
            FieldError(_join(field, p), "FieldValueRequired", "Required value") for p in missing
        ]
    if err.validator == "type":
        types = rule if isinstance(rule, list) else [rule]
        kind = " or ".join(t for t in types if t != "null")
        msg = f"Invalid value: {_quote(value)}: {where} must be of type {kind}: {_quote(value)}"
        return [FieldError(field, "FieldValueTypeInvalid", msg)]
    if err.validator == "enum":
        allowed = ", ".join(_quote(v) for v in rule)
        msg = f"Unsupported value: {_quote(value)}: supported values: {allowed}"
        return [FieldError(field, "FieldValueNotSupported", msg)]
    bounds = {
        "minimum": "should be greater than or equal to",
        "maximum": "should be less than or equal to",
        "exclusiveMinimum": "should be greater than",
        "exclusiveMaximum": "should be less than",
        "minLength": "should be at least {} chars long",
        "maxLength": "may not be longer than {}",
        "minItems": "should have at least {} items",
        "maxItems": "must have at most {} items",
        "pattern": "should match '{}'",
    }
    if err.validator in bounds:
        text = bounds[str(err.validator)]
        text = text.format(rule) if "{}" in text else f"{text} {rule}"
        if err.validator == "maxLength":
            return [FieldError(field, "FieldValueTooLong", f"Too long: {text}")]
        if err.validator == "maxItems":
            return [FieldError(field, "FieldValueTooMany", f"Too many: {len(value)}: {text}")]
        msg = f"Invalid value: {_quote(value)}: {where} {text}"
        return [FieldError(field, "FieldValueInvalid", msg)]
    return [
        FieldError(field, "FieldValueInvalid", f"Invalid value: {_quote(value)}: {err.message}")
    ]


def validate(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> list[FieldError]:
    """Field errors for ``obj`` (empty: valid). ``metadata`` is left out, as the
    API server validates it itself."""
    root = to_json_schema(schema)
    props = dict(root.get("properties") or {})
    for key in _ROOT_KEPT:
        props.pop(key, None)
    root["properties"] = props
    if isinstance(root.get("required"), list):
        root["required"] = [r for r in root["required"] if r not in _ROOT_KEPT]
    instance = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    validator = jsonschema.Draft7Validator(root)
    errors: list[FieldError] = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.path))):
        field = ""
        for part in err.absolute_path:
            field = _join(field, part)
        errors.extend(_describe(err, field))
    return errors


def invalid_message(kind: str, group: str, name: str, errors: list[FieldError]) -> str:
    """The Status message kube-apiserver writes for a 422."""
    resource = f"{kind}.{group}" if group else kind
    body = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    return f'{resource} "{name}" is invalid: {body}'
