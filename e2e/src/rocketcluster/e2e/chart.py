"""What the chart tests need besides pytest: the real ``helm`` run on the chart, the
permissions a list of RBAC rules grants, the checks for the custom resources the
chart renders (a RocketCluster against its generated CRD; prometheus-operator's
objects against the fields it requires), and Prometheus' relabelling of a pod's
labels into target labels."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.crdgen import schema_of, strict_schema
from rocketcluster.e2e.kube import rbac
from rocketcluster.e2e.kube.binaries import BinariesUnavailable, ensure_binaries
from rocketcluster.operator.render import render_cluster

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "charts" / "rocketcluster-operator"
HELM_TIMEOUT_S = 120
SCHEMA_REFUSAL = "values don't meet the specifications of the schema"
WATCHED = ["team-a", "team-b"]  # watchNamespaces in the tests


class HelmFailed(AssertionError):
    """helm exited non-zero; the message carries its stderr."""

    def __init__(self, args: list[str], stderr: str) -> None:
        super().__init__(f"helm {' '.join(args)} failed:\n{stderr}")
        self.stderr = stderr


@dataclass(frozen=True)
class Helm:
    """The real helm binary, isolated from the user's helm configuration and from any
    cluster (``home`` holds helm's cache, config and data; no kubeconfig exists)."""

    binary: Path
    home: Path

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env.update(
            HELM_CACHE_HOME=str(self.home / "cache"),
            HELM_CONFIG_HOME=str(self.home / "config"),
            HELM_DATA_HOME=str(self.home / "data"),
            KUBECONFIG=str(self.home / "no-kubeconfig"),
        )
        return env

    def attempt(self, *args: str, values: Mapping[str, Any] | None = None) -> tuple[int, str, str]:
        """Run helm with ``values`` as a values file on stdin: (exit code, stdout, stderr)."""
        argv = [*args, "-f", "-"] if values is not None else list(args)
        done = subprocess.run(
            [str(self.binary), *argv],
            input=yaml.safe_dump(dict(values)) if values is not None else None,
            capture_output=True,
            text=True,
            timeout=HELM_TIMEOUT_S,
            env=self._env(),
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    def run(self, *args: str, values: Mapping[str, Any] | None = None) -> str:
        code, out, err = self.attempt(*args, values=values)
        if code != 0:
            raise HelmFailed(list(args), err)
        return out

    def refusal(self, *args: str, values: Mapping[str, Any] | None = None) -> str:
        """helm's error output for a command that must fail."""
        code, out, err = self.attempt(*args, values=values)
        assert code != 0, f"helm {' '.join(args)} accepted {values}:\n{out[:2000]}"
        return err

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        chart: Path = CHART,
        release: str = "rc",
        namespace: str = "rocketcluster",
        crds: bool = False,
    ) -> list[dict[str, Any]]:
        args = ["template", release, str(chart), "--namespace", namespace]
        if crds:
            args.append("--include-crds")
        return documents(self.run(*args, values=values or {}))

    def notes(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str = "rc",
        namespace: str = "rocketcluster",
    ) -> str:
        """NOTES.txt as ``helm install`` prints it (a client-side dry run: no cluster)."""
        out = self.run(
            "install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--dry-run=client",
            values=values or {},
        )
        return out.partition("NOTES:\n")[2]


def real_helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """For a session fixture: the real helm, unpacked once per machine by the e2e
    binaries helper; a test that needs it fails loudly (saying what to do) without it."""
    try:
        binaries = ensure_binaries()
    except BinariesUnavailable as exc:
        pytest.fail(str(exc))
    return Helm(binaries.helm, tmp_path_factory.mktemp("helm-home"))


def operand_objects() -> list[dict[str, Any]]:
    """Everything the operator renders for the repository's example clusters, with
    every monitoring option on, the console with its Ingress where there are
    controllers, and a uid (as the API server gives it)."""
    objects = []
    variants: list[tuple[str, str | None]] = [
        (name, None) for name in ("cluster.yaml", "standalone.yaml", "health-reports.yaml")
    ]
    # The health reports' Spark driver's Role, and the Spark Operator's kind.
    variants += [("health-reports-kubernetes.yaml", m) for m in ("kubernetes", "sparkOperator")]
    for name, spark_mode in variants:
        data = load_manifest(REPO / "examples" / name).model_dump(mode="json", by_alias=True)
        if spark_mode is not None:
            data["spec"]["healthReports"]["spark"]["mode"] = spark_mode
        data["spec"]["monitoring"] = dict.fromkeys(data["spec"]["monitoring"], True)
        if data["spec"]["controller"]["replicas"] > 0:
            ingress = {"enabled": True, "host": "console.example.com"}
            data["spec"]["console"] = {"enabled": True, "ingress": ingress}
        data["metadata"]["uid"] = "0b8e1f8e-0000-4000-8000-000000000000"
        objects += render_cluster(RocketCluster.model_validate(data))
    return objects


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


# -- RBAC -----------------------------------------------------------------------------

# What a list of rules grants, matched as the emulator's authorizer matches them.
Permission = rbac.Permission
granted = rbac.granted
allows = rbac.allows


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# -- custom resources -----------------------------------------------------------------


def rocketcluster_problems(obj: dict[str, Any]) -> list[str]:
    """What an API server with the generated CRD says about ``obj`` (its schema, strict
    about unknown fields), and what the model says (it holds the same cross-field rules
    as the CRD's CEL validations). Empty: accepted."""
    validator = jsonschema.Draft7Validator(strict_schema(schema_of("RocketCluster")))
    problems = [
        f"{'.'.join(str(p) for p in err.absolute_path)}: {err.message}"
        for err in validator.iter_errors(obj)
    ]
    if problems:
        return problems
    try:
        RocketCluster.model_validate(obj)
    except ValueError as exc:
        return [str(exc)]
    return []


# prometheus-operator's CRDs (monitoring.coreos.com) are not available offline here, so
# these hold the part of their openAPIV3Schema (v0.7x) that our objects use: the fields
# it requires, their types, and its Duration pattern. The rules themselves are checked
# by promtool where the rules file is made.
DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string", "minLength": 1}, "labels": _STRINGS},
}
_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": _STRINGS,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
    "additionalProperties": False,
}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace",
                "Replace",
                "keep",
                "Keep",
                "drop",
                "Drop",
                "hashmod",
                "HashMod",
                "labelmap",
                "LabelMap",
                "labeldrop",
                "LabelDrop",
                "labelkeep",
                "LabelKeep",
                "lowercase",
                "Lowercase",
                "uppercase",
                "Uppercase",
                "keepequal",
                "KeepEqual",
                "dropequal",
                "DropEqual",
            ]
        },
    },
}
POD_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": DURATION},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": _RELABEL},
                        },
                    },
                },
            },
        },
    },
}
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string", "pattern": DURATION},
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "properties": {
                                        "alert": {"type": "string", "minLength": 1},
                                        "record": {"type": "string", "minLength": 1},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": {"type": "string", "pattern": DURATION},
                                        "keep_firing_for": {"type": "string", "pattern": DURATION},
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                    },
                                    "additionalProperties": False,
                                },
                            },
                        },
                        "additionalProperties": False,
                    },
                }
            },
        },
    },
}


def relabel(labels: dict[str, str], relabelings: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Prometheus' ``replace`` relabelling (the action the chart uses), for checking
    which target labels a PodMonitor's relabelings give a pod: the source labels joined
    by ``;``, the regex anchored, ``$1`` in the replacement, nothing set on no match."""
    out = dict(labels)
    for rule in relabelings:
        assert rule.get("action", "replace").lower() == "replace", rule
        value = rule.get("separator", ";").join(out.get(s, "") for s in rule["sourceLabels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match is None:
            continue
        result = match.expand(re.sub(r"\$\{?(\d+)\}?", r"\\\1", rule.get("replacement", "$1")))
        if result:
            out[rule["targetLabel"]] = result
        else:
            out.pop(rule["targetLabel"], None)
    return out


def pod_meta_labels(pod_labels: Mapping[str, str]) -> dict[str, str]:
    """The ``__meta_kubernetes_pod_label_*`` labels Prometheus' pod discovery gives."""
    return {
        "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
        for k, v in pod_labels.items()
    }


def monitoring_problems(obj: dict[str, Any]) -> list[str]:
    """prometheus-operator's view of a PodMonitor or PrometheusRule (empty: accepted)."""
    schema = {"PodMonitor": POD_MONITOR_SCHEMA, "PrometheusRule": PROMETHEUS_RULE_SCHEMA}
    validator = jsonschema.Draft7Validator(schema[obj["kind"]])
    problems = [
        f"{'.'.join(str(p) for p in err.absolute_path)}: {err.message}"
        for err in validator.iter_errors(obj)
    ]
    if obj["kind"] == "PrometheusRule" and not problems:
        names = [g["name"] for g in obj["spec"]["groups"]]
        problems += [f"group {n!r} twice" for n in sorted(set(names)) if names.count(n) > 1]
    return problems
