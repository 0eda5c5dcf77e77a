"""The Helm chart ``charts/rocketcluster-operator``, run through the real helm: lint,
render with default values and with every option on, every object valid (built-in
kinds under kubernetes-validate --strict, custom resources against their schemas),
values.schema.json refusing bad values, the monitoring objects, the example cluster,
NOTES and ``helm package``. The RBAC has its own module (test_chart_rbac.py)."""

from __future__ import annotations

import copy
import json
import shutil
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rocketcluster.api import kube
from rocketcluster.api.cluster import DEFAULT_IMAGE, load_manifest
from rocketcluster.api.crdgen import CRD_DIR
from rocketcluster.e2e.chart import (
    CHART,
    REPO,
    SCHEMA_REFUSAL,
    WATCHED,
    Helm,
    by_kind,
    documents,
    group_of,
    monitoring_problems,
    one,
    operand_objects,
    pod_meta_labels,
    real_helm,
    relabel,
    rocketcluster_problems,
)
from rocketcluster.operator.monitoring.conventions import (
    BROKER_JOB,
    CONTROLLER_JOB,
    GRAFANA_DASHBOARD_LABEL,
)
from rocketcluster.operator.render.pods import scrape_annotations

OLDEST, NEWEST = "1.27.0", "1.37.0"
RULES_FILE = "rules/rocketcluster.rules.yaml"

# -- values ---------------------------------------------------------------------------

EVERY_OPTION: dict[str, Any] = {
    "image": {"repository": "registry.example.com/mirror/rocketcluster-operator", "tag": "0.1.0"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "serviceAccount": {"annotations": {"example.com/role": "operator"}},
    "logLevel": "DEBUG",
    "extraEnv": [{"name": "ROCKETCLUSTER_TICK_SECONDS", "value": "5"}],
    "podAnnotations": {"example.com/team": "messaging"},
    "podLabels": {"example.com/cost-centre": "42"},
    "priorityClassName": "system-cluster-critical",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    }
                ]
            }
        }
    },
    "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"enabled": True, "namespace": "grafana"},
    },
    "example": {"enabled": True},
}
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cluster-wide-everything": EVERY_OPTION,
    "watch-namespaces-everything": {**EVERY_OPTION, "watchNamespaces": WATCHED},
}


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return real_helm(tmp_path_factory)


@pytest.fixture(scope="session")
def rendered(helm: Helm) -> dict[str, list[dict[str, Any]]]:
    """Each case rendered once, CRDs included."""
    return {name: helm.template(values, crds=True) for name, values in CASES.items()}


def _sample_chart(tmp_path: Path, dashboards: dict[str, str], rules: str | None) -> Path:
    """A copy of the chart with the given dashboards and rules file instead of its own
    (the templates must read whatever files are there)."""
    chart = tmp_path / "rocketcluster-operator"
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("dashboards", "rules"))
    (chart / "dashboards").mkdir()
    for name, text in dashboards.items():
        (chart / "dashboards" / name).write_text(text)
    if rules is not None:
        (chart / "rules").mkdir()
        (chart / "rules" / "rocketcluster.rules.yaml").write_text(rules)
    return chart


# -- versions and CRDs ----------------------------------------------------------------


def test_chart_is_versioned_with_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    versions = {"pyproject.toml": root["project"]["version"]}
    for member in root["tool"]["uv"]["workspace"]["members"]:
        project = tomllib.loads((REPO / member / "pyproject.toml").read_text())["project"]
        versions[f"{member}/pyproject.toml"] = project["version"]
    assert set(versions.values()) == {chart["version"]}, versions
    assert chart["appVersion"] == chart["version"]
    assert chart["apiVersion"] == "v2"


def test_chart_crds_are_the_generated_files() -> None:
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    top = {p.name: p.read_bytes() for p in CRD_DIR.glob("*.yaml")}
    assert chart and chart == top, "run python -m rocketcluster.api.crdgen"


# -- lint and render ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_lint_strict(helm: Helm, case: str) -> None:
    out = helm.run("lint", "--strict", str(CHART), values=CASES[case])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("case", CASES)
def test_every_object_is_valid(
    rendered: dict[str, list[dict[str, Any]]], case: str, version: str
) -> None:
    objects = rendered[case]
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount"} <= kinds
    for obj in objects:
        group = group_of(obj["apiVersion"])
        what = f"{obj['kind']} {obj['metadata']['name']}"
        if group == kube.GROUP:
            assert rocketcluster_problems(obj) == [], what
        elif group == "monitoring.coreos.com":
            assert monitoring_problems(obj) == [], what
        else:
            kubernetes_validate.validate(obj, version, strict=True)


def test_every_option_renders_every_template(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for case in ("cluster-wide-everything", "watch-namespaces-everything"):
        kinds = {o["kind"] for o in rendered[case]}
        assert {"PodMonitor", "PrometheusRule", "ConfigMap", "RocketCluster"} <= kinds, case
    assert {o["kind"] for o in rendered["defaults"]} == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",  # the Lease's (leader election)
        "RoleBinding",
    }


def test_the_checks_would_catch_mistakes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = copy.deepcopy(rendered["cluster-wide-everything"])  # shared with other tests
    deployment = by_kind(objects, "Deployment")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, NEWEST, strict=True)
    example = dict(by_kind(objects, "RocketCluster")[0])
    example["spec"] = {**example["spec"], "brokers": {"groups": 1, "replicas": 9}}
    assert rocketcluster_problems(example)
    example["spec"] = {**example["spec"], "brokers": {"replicas": 2}, "controller": {"replicas": 0}}
    assert rocketcluster_problems(example)  # the model's cross-field rule
    monitor = by_kind(objects, "PodMonitor")[0]
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    assert monitoring_problems(monitor)


def test_operator_deployment(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (default,) = by_kind(rendered["defaults"], "Deployment")
    pod = default["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/rocketcluster/rocketcluster-operator:0.1.0"
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WATCH_NAMESPACE"] == ""
    # main.py reads LIVENESS_ENDPOINT (--liveness): kopf serves it on the probes' port.
    assert env["LIVENESS_ENDPOINT"] == "http://0.0.0.0:8080/healthz"
    assert container["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    # Two replicas elect a leader (leader.py): a new pod is a candidate before an old
    # one goes, and the two prefer different nodes.
    assert default["spec"]["replicas"] == 2
    assert default["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert env["ROCKETCLUSTER_LEADER_ELECT"] == "true"
    assert env["ROCKETCLUSTER_LEASE_NAME"] == "rc-rocketcluster-operator"
    assert (
        env["ROCKETCLUSTER_LEASE_DURATION_SECONDS"],
        env["ROCKETCLUSTER_LEASE_RENEW_DEADLINE_SECONDS"],
        env["ROCKETCLUSTER_LEASE_RETRY_PERIOD_SECONDS"],
    ) == ("15", "10", "2")
    fields = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert fields["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert fields["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"

    (every,) = by_kind(rendered["watch-namespaces-everything"], "Deployment")
    pod = every["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/mirror/rocketcluster-operator:0.1.0"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WATCH_NAMESPACE"] == "team-a,team-b"
    assert env["LOG_LEVEL"] == "DEBUG" and env["ROCKETCLUSTER_TICK_SECONDS"] == "5"
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["nodeSelector"] == EVERY_OPTION["nodeSelector"]
    assert pod["tolerations"] == EVERY_OPTION["tolerations"]
    assert pod["affinity"] == EVERY_OPTION["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert every["spec"]["template"]["metadata"]["labels"]["example.com/cost-centre"] == "42"


def test_standard_labels_and_names(helm: Helm) -> None:
    for obj in helm.template():
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "rocketcluster-operator-0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "rc"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert obj["metadata"]["name"] in {
            "rc-rocketcluster-operator",
            "rc-rocketcluster-operator-discovery",
            "rc-rocketcluster-operator-leader-election",
        }
    names = {o["metadata"]["name"] for o in helm.template({"fullnameOverride": "ops"})}
    assert names == {"ops", "ops-discovery", "ops-leader-election"}
    objects = helm.template({"nameOverride": "rco"}, release="prod")
    assert {o["metadata"]["name"] for o in objects} == {
        "prod-rco",
        "prod-rco-discovery",
        "prod-rco-leader-election",
    }
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "rco",
        "app.kubernetes.io/instance": "prod",
    }
    objects = helm.template(release="rocketcluster-operator-prod")
    assert by_kind(objects, "Deployment")[0]["metadata"]["name"] == "rocketcluster-operator-prod"


def test_an_existing_service_account(helm: Helm) -> None:
    objects = helm.template({"serviceAccount": {"create": False, "name": "ops"}})
    assert not by_kind(objects, "ServiceAccount")
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    for binding in by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "ops", "namespace": "rocketcluster"}
        ]
    objects = helm.template({"rbac": {"create": False}})
    assert not {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} & {
        o["kind"] for o in objects
    }


# -- values.schema.json ---------------------------------------------------------------

BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "negative replicas": ({"replicaCount": -1}, "/replicaCount"),
    "bad lease timing": (
        {"leaderElection": {"retryPeriodSeconds": 0}},
        "/leaderElection/retryPeriodSeconds",
    ),
    "wrong type": ({"replicaCount": "one"}, "/replicaCount"),
    "unknown key": ({"replicas": 1}, "'replicas' not allowed"),
    "unknown nested key": ({"image": {"pullpolicy": "Always"}}, "'pullpolicy' not allowed"),
    "bad enum": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "bad log level": ({"logLevel": "VERBOSE"}, "/logLevel"),
    "bad namespace": ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    "namespace twice": ({"watchNamespaces": ["a", "a"]}, "/watchNamespaces"),
    "namespaces not a list": ({"watchNamespaces": "a,b"}, "/watchNamespaces"),
    "privileged port": ({"health": {"port": 80}}, "/health/port"),
    "bad quantity": ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    "bad duration": (
        {"monitoring": {"podMonitor": {"interval": "30 seconds"}}},
        "/monitoring/podMonitor/interval",
    ),
    "long example name": ({"example": {"name": "x" * 41}}, "/example/name"),
    "example spec not an object": ({"example": {"spec": "small"}}, "/example/spec"),
    "account without a name": ({"serviceAccount": {"create": False}}, "/serviceAccount"),
    "env the chart sets": (
        {"extraEnv": [{"name": "WATCH_NAMESPACE", "value": "x"}]},
        "/extraEnv/0/name",
    ),
    "bad image reference": ({"image": {"repository": "Not An Image"}}, "/image/repository"),
    "bad label key": ({"podLabels": {"bad key": "x"}}, "invalid propertyName 'bad key'"),
    "bad label value": ({"nodeSelector": {"zone": "a b"}}, "/nodeSelector/zone"),
    "bad secret name": ({"imagePullSecrets": [{"name": "Creds"}]}, "/imagePullSecrets/0/name"),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_values_schema_refuses_bad_values(helm: Helm, case: str) -> None:
    values, where = BAD_VALUES[case]
    error = helm.refusal("template", "rc", str(CHART), values=values)
    assert SCHEMA_REFUSAL in error, error
    assert where in error, error


# -- monitoring -----------------------------------------------------------------------


def test_pod_monitor_scrapes_every_broker_and_controller_pod(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Every pod the operator runs is selected, on the port and path its metrics are
    served at, with the target labels the dashboards and alerts expect (the monitoring
    conventions); the operator's own pod is not."""
    workloads = ("StatefulSet", "Deployment")
    templates = [o["spec"]["template"] for o in operand_objects() if o["kind"] in workloads]
    # The console (spec.console) serves no /metrics: never scraped.
    consoles = [t for t in templates if t["metadata"]["labels"][kube.LABEL_COMPONENT] == "console"]
    templates = [t for t in templates if t not in consoles]
    assert consoles
    jobs = {kube.COMPONENT_BROKER: BROKER_JOB, kube.COMPONENT_CONTROLLER: CONTROLLER_JOB}
    for case, namespaces in (
        ("cluster-wide-everything", {"any": True}),
        ("watch-namespaces-everything", {"matchNames": WATCHED}),
    ):
        (monitor,) = by_kind(rendered[case], "PodMonitor")
        spec = monitor["spec"]
        assert spec["namespaceSelector"] == namespaces
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        (endpoint,) = spec["podMetricsEndpoints"]
        assert endpoint["path"] == scrape_annotations()["prometheus.io/path"]
        assert endpoint["honorLabels"] is True
        components = set()
        for template in templates:
            labels = template["metadata"]["labels"]
            assert _selects(spec["selector"], labels), labels
            ports = {
                p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]
            }
            assert str(ports[endpoint["port"]]) == scrape_annotations()["prometheus.io/port"]
            component = labels[kube.LABEL_COMPONENT]
            components.add(component)
            default_job = {"job": f"rocketcluster/{monitor['metadata']['name']}"}
            target = relabel(pod_meta_labels(labels) | default_job, endpoint["relabelings"])
            assert target["job"] == jobs[component]
            assert target["cluster"] == labels[kube.LABEL_CLUSTER]
            assert target.get("group") == labels.get(kube.LABEL_GROUP)
        assert components == set(jobs)
        (operator,) = by_kind(rendered[case], "Deployment")
        assert not _selects(spec["selector"], operator["spec"]["template"]["metadata"]["labels"])
        for template in consoles:
            assert not _selects(spec["selector"], template["metadata"]["labels"])


def test_the_relabel_check_follows_prometheus() -> None:
    rules = [
        {
            "sourceLabels": ["a", "b"],
            "regex": "(x);(.+)",
            "targetLabel": "t",
            "replacement": "$2-${1}",
        },
        {"sourceLabels": ["c"], "regex": "(.+)", "targetLabel": "u"},
        {"sourceLabels": ["c"], "targetLabel": "v"},  # (.*) matches "": an empty v is no v
    ]
    assert relabel({"a": "x", "b": "y", "v": "old"}, rules) == {"a": "x", "b": "y", "t": "y-x"}
    assert relabel({"a": "z", "b": "y", "t": "kept"}, rules) == {"a": "z", "b": "y", "t": "kept"}
    assert pod_meta_labels({"rocketcluster.io/group": "g"}) == {
        "__meta_kubernetes_pod_label_rocketcluster_io_group": "g"
    }


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_prometheus_rule_carries_the_rules_file(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    rules = yaml.safe_load((CHART / RULES_FILE).read_text())
    (rule,) = by_kind(rendered["cluster-wide-everything"], "PrometheusRule")
    assert rule["spec"]["groups"] == rules["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_one_dashboard_config_map_per_file(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    files = sorted((CHART / "dashboards").glob("*.json"))
    assert files, "the chart ships no dashboards"
    maps = by_kind(rendered["cluster-wide-everything"], "ConfigMap")
    assert len(maps) == len(files)
    for config_map in maps:
        ((name, text),) = config_map["data"].items()
        assert text == (CHART / "dashboards" / name).read_text().rstrip("\n")
        assert json.loads(text)["title"]
        assert len(text.encode()) < 1024 * 1024  # a ConfigMap holds at most 1 MiB
        assert config_map["metadata"]["namespace"] == "grafana"
        assert config_map["metadata"]["labels"][GRAFANA_DASHBOARD_LABEL] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "RocketCluster"}


SAMPLE_RULES = """\
groups:
  - name: rocketcluster.sample
    rules:
      - alert: RocketClusterSampleNoMaster
        expr: max by (cluster, group) (rocketmq_group_has_master) == 0
        for: 1m
        labels: {severity: critical}
        annotations:
          summary: "{{ $labels.group }} has no master"
"""


def test_dashboards_and_rules_come_from_whatever_files_are_there(
    helm: Helm, tmp_path: Path
) -> None:
    dashboards = {
        "Broker_Replication.json": '{\n  "title": "Broker replication",\n  "panels": []\n}\n',
        "cluster-overview.json": '{"title": "Cluster overview", "panels": []}',
    }
    chart = _sample_chart(tmp_path, dashboards, SAMPLE_RULES)
    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True},
            "dashboards": {
                "enabled": True,
                "label": "example.com/dashboard",
                "labelValue": "rocket",
                "folderAnnotation": "example.com/folder",
                "folder": "Messaging",
            },
        }
    }
    objects = helm.template(values, chart=chart)
    maps = {m["metadata"]["name"]: m for m in by_kind(objects, "ConfigMap")}
    assert sorted(maps) == [
        "rc-rocketcluster-operator-dashboard-broker-replication",
        "rc-rocketcluster-operator-dashboard-cluster-overview",
    ]
    replication = maps["rc-rocketcluster-operator-dashboard-broker-replication"]
    assert replication["data"] == {
        "Broker_Replication.json": dashboards["Broker_Replication.json"].rstrip("\n")
    }
    assert replication["metadata"]["labels"]["example.com/dashboard"] == "rocket"
    assert replication["metadata"]["annotations"] == {"example.com/folder": "Messaging"}
    assert replication["metadata"]["namespace"] == "rocketcluster"
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(SAMPLE_RULES)
    assert monitoring_problems(rule) == []


def test_monitoring_without_its_files_says_what_is_missing(helm: Helm, tmp_path: Path) -> None:
    chart = _sample_chart(tmp_path, {}, None)
    error = helm.refusal(
        "template", "rc", str(chart), values={"monitoring": {"prometheusRule": {"enabled": True}}}
    )
    assert "has no rules/rocketcluster.rules.yaml" in error
    error = helm.refusal(
        "template", "rc", str(chart), values={"monitoring": {"dashboards": {"enabled": True}}}
    )
    assert "has no dashboards/*.json" in error
    (chart / "rules").mkdir()
    (chart / RULES_FILE).write_text("groups: [unclosed\n")
    error = helm.refusal(
        "template", "rc", str(chart), values={"monitoring": {"prometheusRule": {"enabled": True}}}
    )
    assert "rules/rocketcluster.rules.yaml: expected a Prometheus rules file" in error


# -- the example cluster and NOTES ----------------------------------------------------


def test_example_cluster(helm: Helm) -> None:
    (example,) = by_kind(helm.template({"example": {"enabled": True}}), "RocketCluster")
    assert example["metadata"]["namespace"] == "rocketcluster"
    assert example["spec"]["image"] == DEFAULT_IMAGE  # the broker released with the chart
    assert example["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert rocketcluster_problems(example) == []
    values = {"example": {"enabled": True}, "watchNamespaces": WATCHED}
    (example,) = by_kind(helm.template(values), "RocketCluster")
    assert example["metadata"]["namespace"] == "team-a"
    values = {
        "image": {
            "repository": "registry.example.com/mirror/rocketcluster-operator",
            "tag": "1.2.3",
        },
        "example": {
            "enabled": True,
            "name": "small",
            "namespace": "apps",
            "spec": {"brokers": {"groups": 2}},
        },
    }
    (example,) = by_kind(helm.template(values), "RocketCluster")
    assert (example["metadata"]["name"], example["metadata"]["namespace"]) == ("small", "apps")
    # Helm merges the given spec into the default one (a key set to null removes it).
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["example"]["spec"]
    assert example["spec"] == {
        **defaults,
        "brokers": {**defaults["brokers"], "groups": 2},
        "image": "registry.example.com/mirror/rocketcluster-broker:1.2.3",
    }
    assert rocketcluster_problems(example) == []
    values = {"example": {"enabled": True, "spec": {"image": "example.com/rc:9", "topics": None}}}
    (example,) = by_kind(helm.template(values), "RocketCluster")
    assert example["spec"]["image"] == "example.com/rc:9"
    assert "topics" not in example["spec"]


def test_notes_tell_the_next_command(helm: Helm) -> None:
    notes = helm.notes()
    cluster = load_manifest(REPO / "examples" / "cluster.yaml")
    assert "kubectl -n rocketcluster apply -f examples/cluster.yaml" in notes
    assert (
        f"kubectl -n rocketcluster wait rocketcluster/{cluster.name} --for=condition=Ready"
    ) in notes
    assert "kubectl -n rocketcluster get rocketclusters" in notes
    assert "kubectl apply -f charts/rocketcluster-operator/crds/" in notes
    assert (CHART / "crds").is_dir()
    notes = helm.notes({"watchNamespaces": WATCHED, "example": {"enabled": True, "name": "small"}})
    assert "It manages RocketClusters in: team-a, team-b" in notes
    assert "kubectl -n team-a wait rocketcluster/small --for=condition=Ready" in notes
    assert "apply -f examples" not in notes


# -- packaging --------------------------------------------------------------------------


def test_helm_package(helm: Helm, tmp_path: Path) -> None:
    helm.run("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / "rocketcluster-operator-0.1.0.tgz"
    assert [p.name for p in tmp_path.iterdir()] == [package.name]
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
        for crd in CRD_DIR.glob("*.yaml"):
            member = tar.extractfile(f"rocketcluster-operator/crds/{crd.name}")
            assert member is not None and member.read() == crd.read_bytes()
    assert {
        "rocketcluster-operator/Chart.yaml",
        "rocketcluster-operator/values.yaml",
        "rocketcluster-operator/values.schema.json",
        "rocketcluster-operator/templates/NOTES.txt",
    } <= names
    shipped = [*(CHART / "dashboards").glob("*.json"), CHART / RULES_FILE]
    assert {f"rocketcluster-operator/{p.relative_to(CHART)}" for p in shipped} <= names
    assert not any("__pycache__" in n or n.endswith(".tgz") for n in names)
    assert documents(helm.run("template", "rc", str(package))) == documents(
        helm.run("template", "rc", str(CHART))
    )


# -- leader election --------------------------------------------------------------------


def test_two_replicas_without_an_election_are_refused(helm: Helm) -> None:
    values = {"replicaCount": 2, "leaderElection": {"enabled": False}}
    error = helm.refusal("template", "rc", str(CHART), values=values)
    assert "replicaCount > 1 needs leaderElection.enabled: true" in error, error
    single = helm.template({"replicaCount": 1, "leaderElection": {"enabled": False}})
    (deployment,) = by_kind(single, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ROCKETCLUSTER_LEADER_ELECT"] == "false"
    assert not by_kind(single, "PodDisruptionBudget")
    assert "rc-rocketcluster-operator-leader-election" not in {
        o["metadata"]["name"] for o in single
    }


def test_the_replicas_may_move_one_at_a_time(helm: Helm) -> None:
    (budget,) = by_kind(helm.template(), "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    (deployment,) = by_kind(helm.template(), "Deployment")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert not by_kind(
        helm.template({"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget"
    )


def test_the_lease_is_all_the_leader_election_may_touch(helm: Helm) -> None:
    """Create (which RBAC cannot limit by name), then get and update of the one Lease
    named after the release, in the release's namespace."""
    objects = helm.template()
    role = one(objects, "Role", "rc-rocketcluster-operator-leader-election")
    assert role["metadata"]["namespace"] == "rocketcluster"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["rc-rocketcluster-operator"],
            "verbs": ["get", "update"],
        },
    ]
    (binding,) = [
        b
        for b in by_kind(objects, "RoleBinding")
        if b["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "rc-rocketcluster-operator",
            "namespace": "rocketcluster",
        }
    ]
