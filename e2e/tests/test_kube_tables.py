"""Server-side printing: the JSONPath subset of printer columns, Kubernetes' human
durations, and what the real ``kubectl get`` shows from the emulator's Tables."""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.harness import KubeHarness
from rocketcluster.e2e.kube.tables import JsonPathError, find, human_duration, table

OBJ = {
    "metadata": {"name": "prod", "creationTimestamp": "2026-11-25T10:00:00Z"},
    "spec": {"brokers": {"groups": 2}, "flags": [True, False]},
    "status": {
        "conditions": [
            {"type": "Progressing", "status": "False"},
            {"type": "Ready", "status": "True"},
        ]
    },
}


def test_find_fields_indexes_stars_and_filters() -> None:
    assert find(OBJ, ".spec.brokers.groups") == [2]
    assert find(OBJ, "{.spec.flags[1]}") == [False]
    assert find(OBJ, ".status.conditions[*].type") == ["Progressing", "Ready"]
    assert find(OBJ, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert find(OBJ, ".status.conditions[?(@.type!='Ready')].type") == ["Progressing"]
    assert find(OBJ, ".status.missing.deeper") == []
    with pytest.raises(JsonPathError):
        find(OBJ, ".spec..recursive")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (190, "3m10s"),
        (600, "10m"),
        (7200, "120m"),
        (3 * 3600 + 600, "3h10m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (40 * 86400, "40d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_durations_as_kubectl_shows_them(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_a_table_has_name_first_then_the_columns_typed() -> None:
    now = datetime.datetime(2026, 11, 25, 10, 5, tzinfo=datetime.UTC)
    columns: list[dict[str, Any]] = [
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        },
        {"name": "Groups", "type": "integer", "jsonPath": ".spec.brokers.groups"},
        {"name": "Op", "type": "string", "jsonPath": ".status.operation", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    out = table([OBJ], columns, "7", now)
    assert out["kind"] == "Table" and out["metadata"] == {"resourceVersion": "7"}
    assert [c["name"] for c in out["columnDefinitions"]] == ["Name", "Ready", "Groups", "Op", "Age"]
    assert out["columnDefinitions"][3]["priority"] == 1
    (row,) = out["rows"]
    assert row["cells"] == ["prod", "True", 2, None, "5m"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert [c["name"] for c in table([OBJ], [], "1", now)["columnDefinitions"]] == ["Name", "Age"]


CRD = textwrap.dedent("""\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: gadgets.example.com}
    spec:
      group: example.com
      scope: Namespaced
      names: {plural: gadgets, singular: gadget, kind: Gadget}
      versions:
      - name: v1
        served: true
        storage: true
        subresources: {status: {}}
        additionalPrinterColumns:
        - {name: Size, type: integer, jsonPath: .spec.size}
        - {name: Phase, type: string, jsonPath: .status.phase}
        - {name: Note, type: string, jsonPath: .spec.note, priority: 1}
        - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  size: {type: integer}
                  note: {type: string}
              status: {type: object, x-kubernetes-preserve-unknown-fields: true}
    """)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[KubeHarness]:
    with KubeHarness(tmp_path_factory.mktemp("tables"), realise=False) as harness:
        yield harness


def test_kubectl_get_shows_the_printer_columns(kube: KubeHarness) -> None:
    kube.kubectl("apply", "-f", "-", input=CRD)
    kube.kubectl("wait", "--for=condition=Established", "crd/gadgets.example.com")
    gadget = "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\n"
    kube.kubectl("apply", "-f", "-", input=gadget + "spec: {size: 3, note: hello}\n")
    kube.patch("gadgets", "default", "g1", {"status": {"phase": "Running"}}, subresource="status")
    header, row = kube.kubectl("get", "gadgets").stdout.splitlines()
    assert header.split() == ["NAME", "SIZE", "PHASE", "AGE"]
    assert row.split()[:3] == ["g1", "3", "Running"]
    wide = kube.kubectl("get", "gadget", "g1", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "SIZE", "PHASE", "NOTE", "AGE"]
    assert wide[1].split()[:4] == ["g1", "3", "Running", "hello"]
    # built-in kinds get Name and Age
    assert kube.kubectl("get", "namespaces").stdout.split()[:2] == ["NAME", "AGE"]
