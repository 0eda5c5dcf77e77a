"""Rendered objects as text: multi-document YAML (as ``helm template`` prints) or a
JSON ``List``."""

from __future__ import annotations

import json
from typing import Any

import yaml

from rocketcluster.operator.render.meta import K8sObject


class _Dumper(yaml.SafeDumper):
    """Block YAML without anchors and aliases: each object reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[K8sObject], header: str = "") -> str:
    docs = []
    for obj in objects:
        source = f"# {obj['kind']} {obj['metadata']['name']}\n"
        docs.append(source + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100))
    return (header + "---\n" if header else "---\n") + "---\n".join(docs)


def to_json(objects: list[K8sObject]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2)
