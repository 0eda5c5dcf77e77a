"""security.auth rendered: process configs name the mounted files (never a secret),
brokers mount the users and admin token Secrets, controllers the token only, the
PodMonitor scrapes with the token; the Secrets the reconciler applies are valid."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rocketcluster.api.auth import UserCredentials, UsersFile
from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.api.users import UserSpec
from rocketcluster.operator.render import auth, render_cluster
from rocketcluster.operator.render.monitoring import pod_monitor

NEWEST = "1.37.0"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def secured(**auth_spec: Any) -> RocketCluster:
    data = load_manifest(EXAMPLES / "cluster.yaml").model_dump(by_alias=True, mode="json")
    data["spec"]["security"] = {"auth": {"enabled": True, **auth_spec}}
    data["spec"]["users"] = [{"name": "app", "permissions": [{"topic": "t", "actions": ["pub"]}]}]
    return RocketCluster.model_validate(data)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_configs_point_at_mounted_files_and_hold_no_secret() -> None:
    objects = render_cluster(secured(clockSkewSeconds=60))
    for cm in of_kind(objects, "ConfigMap"):
        for name, text in cm["data"].items():
            if not name.endswith(".json") or "controller" in cm["metadata"]["name"]:
                continue
            broker = BrokerProcessConfig.model_validate(json.loads(text))
            assert broker.auth.enabled and broker.auth.clock_skew_seconds == 60
            assert str(broker.auth.users_file) == f"{auth.USERS_DIR}/users.json"
            assert "secretKey" not in text
    controller_files = [
        ControllerProcessConfig.model_validate(json.loads(text))
        for cm in of_kind(objects, "ConfigMap")
        if "controller" in cm["metadata"]["name"]
        for text in cm["data"].values()
    ]
    assert controller_files and all(
        c.auth.enabled and c.auth.users_file is None for c in controller_files
    )


def test_pods_mount_the_secrets_they_need() -> None:
    cluster = secured()
    objects = render_cluster(cluster)
    for sts in of_kind(objects, "StatefulSet"):
        spec = sts["spec"]["template"]["spec"]
        secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        assert secrets == {"prod-users", "prod-admin-token"}
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert {auth.USERS_DIR, auth.TOKEN_DIR} <= mounts
        kubernetes_validate.validate(sts, NEWEST, strict=True)
    for deployment in of_kind(objects, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        assert secrets == {"prod-admin-token"}
        kubernetes_validate.validate(deployment, NEWEST, strict=True)
    endpoint = pod_monitor(cluster)["spec"]["podMetricsEndpoints"][0]
    assert endpoint["bearerTokenSecret"] == {"name": "prod-admin-token", "key": "token"}


def test_a_named_admin_token_secret_is_used() -> None:
    cluster = secured(adminTokenSecret="ops-token")
    assert auth.token_secret(cluster) == "ops-token"
    assert auth.admin_token_secret(cluster, "x")["metadata"]["name"] == "ops-token"


def test_the_secrets_the_reconciler_applies() -> None:
    cluster = secured()
    user = UserSpec(name="App_1", permissions=[])
    owner = {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketUser",
        "name": "app-1",
        "uid": "u",
    }
    secret = auth.user_secret(cluster, user, "k" * 43, owner)
    assert secret["metadata"]["name"] == "prod-user-app-1"
    assert secret["metadata"]["ownerReferences"] == [owner]
    assert auth.secret_text(secret, "accessKey") == "App_1"
    users = [
        UserCredentials.of(user, "k" * 43),
        UserCredentials(access_key="a", secret_key="s" * 20),
    ]
    users_secret = auth.users_secret(cluster, users)
    text = base64.b64decode(users_secret["data"]["users.json"]).decode()
    assert [u.access_key for u in UsersFile.loads(text).users] == ["App_1", "a"]
    for obj in (secret, users_secret, auth.admin_token_secret(cluster, "t" * 43)):
        kubernetes_validate.validate(obj, NEWEST, strict=True)


@pytest.mark.parametrize("example", ["cluster.yaml", "standalone.yaml"])
def test_nothing_changes_while_auth_is_off(example: str) -> None:
    objects = render_cluster(load_manifest(EXAMPLES / example))
    assert not any("auth" in json.dumps(o.get("data", {})) for o in of_kind(objects, "ConfigMap"))
    assert not any(
        "secret" in v
        for w in of_kind(objects, "StatefulSet") + of_kind(objects, "Deployment")
        for v in w["spec"]["template"]["spec"]["volumes"]
    )


def test_the_health_report_job_gets_the_token() -> None:
    data = load_manifest(EXAMPLES / "health-reports.yaml").model_dump(by_alias=True, mode="json")
    data["spec"]["security"] = {"auth": {"enabled": True}}
    [job] = of_kind(render_cluster(RocketCluster.model_validate(data)), "CronJob")
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    [token] = [e for e in container["env"] if e["name"] == "ROCKETCLUSTER_ADMIN_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"]["key"] == "token"
    kubernetes_validate.validate(job, NEWEST, strict=True)
