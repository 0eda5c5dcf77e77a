"""security.auth through the operator on the emulated cluster: the operator makes the
admin token, one Secret per user (spec.users and RocketUser) and the users Secret; the
broker pod mounts them, the operator's own admin calls carry the token (the cluster
becomes Ready), the official client with a RocketUser's keys works and without keys
is refused, and a key rotated in its Secret reaches the broker without a restart.
The console (spec.console) runs from what the operator rendered, with the same
Secrets: sign-in with the admin token or a user's keys, each seeing what it may."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.exception import UnauthorizedException
from rocketmq.v5.model import Message
from rocketmq.v5.producer import Producer

from rocketcluster.api import kube
from rocketcluster.api.auth import UsersFile
from rocketcluster.ctl.testing import quiet_official_client, wait_for
from rocketcluster.e2e.k8s.backends import BackendUnavailable, EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition

REPO = Path(__file__).resolve().parents[2]
CLUSTER = {
    "apiVersion": "rocketcluster.io/v1alpha1",
    "kind": "RocketCluster",
    "metadata": {"name": "guarded"},
    "spec": {
        "controller": {"replicas": 0},
        "brokers": {"groups": 1, "replicas": 1},
        "topics": [{"name": "orders", "queues": 2}],
        "consumerGroups": [{"name": "billing"}],
        "security": {"auth": {"enabled": True}},
        "users": [{"name": "ops", "admin": True}],
        "console": {"enabled": True},
    },
}
ROCKET_USER = {
    "apiVersion": "rocketcluster.io/v1alpha1",
    "kind": "RocketUser",
    "metadata": {"name": "orders-app"},
    "spec": {
        "cluster": "guarded",
        "userName": "Orders_App",
        "permissions": [{"topic": "orders", "actions": ["pub"]}],
    },
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatedCluster]:
    quiet_official_client()
    try:
        backend = EmulatedBackend(tmp_path_factory.mktemp("k8s-users"), REPO / "crds")
    except BackendUnavailable as exc:
        pytest.fail(f"emulated backend: {exc}")
    operated = OperatedCluster(backend, "guarded")
    try:
        manifest = yaml.safe_dump_all([CLUSTER, ROCKET_USER])
        backend.kubectl("apply", "-n", backend.namespace, "-f", "-", input=manifest)
        yield operated
    finally:
        operated.close()
        backend.close()


def secret(cluster: OperatedCluster, name: str, key: str) -> str | None:
    found = cluster.backend.get("secret", name) or {}
    raw = (found.get("data") or {}).get(key)
    return base64.b64decode(raw).decode() if raw else None


def users_in(cluster: OperatedCluster) -> dict[str, str]:
    text = secret(cluster, "guarded-users", "users.json")
    return {u.access_key: u.secret_key for u in UsersFile.loads(text).users} if text else {}


def send(cluster: OperatedCluster, ak: str, sk: str) -> bool:
    """Whether a message sent with these keys is stored (client 5.1.2 reports a refused
    route as a generic exception)."""
    config = ClientConfiguration(cluster.endpoints(), Credentials(ak, sk), request_timeout=5)
    producer = Producer(config, ("orders",))
    producer.startup()
    try:
        msg = Message()
        msg.topic, msg.body = "orders", b"hello"
        return bool(producer.send(msg).message_id)
    except UnauthorizedException:  # the key changed between its route and its send
        return False
    except Exception as exc:
        if "route" not in str(exc):
            raise
        return False
    finally:
        producer.shutdown()


def test_the_operator_makes_the_secrets(cluster: OperatedCluster) -> None:
    def both() -> dict[str, str] | None:
        found = users_in(cluster)
        return found if found.keys() == {"ops", "Orders_App"} else None

    keys = wait_for(both, timeout=120, what="the users Secret with both users")
    assert keys["Orders_App"] == secret(cluster, "guarded-user-orders-app", "secretKey")
    assert len(keys["Orders_App"]) >= 43
    assert secret(cluster, "guarded-user-orders-app", "accessKey") == "Orders_App"
    assert keys["ops"] == secret(cluster, "guarded-user-ops", "secretKey")
    assert len(secret(cluster, "guarded-admin-token", "token") or "") >= 43
    user: dict[str, Any] = wait_for(
        lambda: (
            (u := cluster.backend.get("rocketuser", "orders-app") or {}).get("status")
            and u["status"].get("secretName")
            and u
        ),
        timeout=60,
        what="the RocketUser's status",
    )
    assert user["status"]["name"] == "Orders_App"
    assert user["status"]["secretName"] == "guarded-user-orders-app"
    owners = (cluster.backend.get("secret", "guarded-user-orders-app") or {})["metadata"]
    assert owners["ownerReferences"][0]["kind"] == "RocketUser"
    configs = wait_for(
        lambda: cluster.backend.get("configmap", "guarded-broker-0-config"),
        timeout=60,
        what="the broker's ConfigMap",
    )
    assert "secretKey" not in json.dumps(configs) and "usersFile" in json.dumps(configs)


def test_clients_with_the_keys_work_and_others_are_refused(cluster: OperatedCluster) -> None:
    # Ready needs the operator's own calls to the broker's admin API: they carry the token.
    cluster.wait_condition("Ready", "True", timeout=240)
    key = users_in(cluster)["Orders_App"]
    assert wait_for(lambda: send(cluster, "Orders_App", key), timeout=60, what="a send")
    assert not send(cluster, "", "")
    assert not send(cluster, "Orders_App", "not-the-key-0123456789")


def test_a_key_rotated_in_its_secret_reaches_the_broker(cluster: OperatedCluster) -> None:
    cluster.wait_condition("Ready", "True", timeout=240)
    old = users_in(cluster)["Orders_App"]
    new = "rotated-by-hand-0123456789abcdef"
    patch = {"data": {"secretKey": base64.b64encode(new.encode()).decode()}}
    cluster.backend.kubectl(
        "patch",
        "secret",
        "guarded-user-orders-app",
        "-n",
        cluster.backend.namespace,
        "--type",
        "merge",
        "-p",
        json.dumps(patch),
    )
    wait_for(lambda: users_in(cluster).get("Orders_App") == new, timeout=60, what="users Secret")
    assert wait_for(lambda: send(cluster, "Orders_App", new), timeout=60, what="the new key")
    assert not send(cluster, "Orders_App", old)


def test_a_key_brought_by_a_person_is_kept(cluster: OperatedCluster) -> None:
    """A person makes the user's Secret first (their own key, none of the operator's
    labels), then the RocketUser: the operator takes that key, it makes none."""
    ns = cluster.backend.namespace
    mine = "a-key-a-person-chose-0123456789"
    own = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "guarded-user-early"},
        "data": {
            "accessKey": base64.b64encode(b"early").decode(),
            "secretKey": base64.b64encode(mine.encode()).decode(),
        },
    }
    cluster.backend.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(own))
    early = {**ROCKET_USER, "metadata": {"name": "early"}, "spec": {"cluster": "guarded"}}
    cluster.backend.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(early))
    wait_for(lambda: users_in(cluster).get("early") == mine, timeout=60, what="the person's key")
    assert secret(cluster, "guarded-user-early", "secretKey") == mine


def test_the_console_serves_the_cluster_with_the_operators_secrets(
    cluster: OperatedCluster,
) -> None:
    cluster.wait_condition("Ready", "True", timeout=240)
    ns = cluster.backend.namespace
    url = "http://" + cluster.backend.address(f"{kube.service_host('guarded-console', ns)}:8090")

    def answers() -> bool:
        try:
            return httpx.get(url + "/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, timeout=180, what="the console pod to serve through its Service")
    token = secret(cluster, "guarded-admin-token", "token")
    assert token and secret(cluster, "guarded-console-session", "sessionKey")
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/").status_code == 303  # sign in first
        assert http.post("/signin", data={"token": "wrong"}).status_code == 401
        assert http.post("/signin", data={"token": token}).status_code == 303
        page = http.get("/")
        assert page.status_code == 200
        # Its config names the broker pod by its cluster DNS name; the standalone
        # broker answered, with the admin token the console read from its Secret.
        assert "Ready" in page.text and "guarded-broker-0-0" in page.text
        assert "does not answer" not in page.text
        assert "orders" in http.get("/topics").text
    key = users_in(cluster)["Orders_App"]
    with httpx.Client(base_url=url, timeout=30) as http:
        signed = http.post("/signin", data={"access_key": "Orders_App", "secret_key": key})
        assert signed.status_code == 303
        assert "orders" in http.get("/topics").text  # pub on orders: it may see it
        assert http.get("/groups/billing").status_code == 403  # no sub on billing


def test_a_verb_missing_from_the_chart_is_a_forbidden_warning(cluster: OperatedCluster) -> None:
    """The emulator enforces RBAC: with ``delete pods`` taken out of the chart's
    ClusterRole, the roll of a spec change is refused, and the status says so in a
    Warning (reason Forbidden) quoting the API server; granted again, the roll goes on."""
    backend = cluster.backend
    assert isinstance(backend, EmulatedBackend)
    cluster.wait_condition("Ready", "True", timeout=240)
    role_name = backend.identity.service_account  # the chart's fullname
    role = backend.harness.get("clusterroles", None, role_name)
    assert role is not None
    granted = json.loads(json.dumps(role["rules"]))
    narrowed = [
        {**r, "verbs": [v for v in r["verbs"] if v != "delete"]}
        if r.get("resources") == ["pods"]
        else r
        for r in granted
    ]
    assert narrowed != granted

    def set_rules(rules: list[dict[str, Any]]) -> None:
        current = backend.harness.get("clusterroles", None, role_name) or {}
        backend.kubectl("apply", "-f", "-", input=yaml.safe_dump({**current, "rules": rules}))

    set_rules(narrowed)
    try:
        cluster.patch({"brokers": {"groups": 1, "replicas": 1, "maxMessageBytes": 2097152}})

        def forbidden() -> dict[str, Any] | None:
            warning = next(
                (c for c in cluster.status().get("conditions") or [] if c["type"] == "Warning"),
                None,
            )
            return warning if warning and warning.get("reason") == "Forbidden" else None

        warning = wait_for(forbidden, timeout=120, what="a Forbidden warning in status")
        message = warning["message"]
        assert 'cannot delete resource "pods"' in message, message
        assert f"system:serviceaccount:{backend.identity.namespace}:" in message, message
    finally:
        set_rules(granted)
    cluster.wait(
        lambda s: cluster.settled(s) and (condition(s, "Warning") or {}).get("status") == "False",
        240,
        "the roll finished once delete pods was granted again",
    )
