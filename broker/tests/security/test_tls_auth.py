"""TLS and auth together, as a production cluster runs them: the unmodified official
client over TLS with the right access key and secret key sends and receives; with a
wrong secret key, an unknown access key or none at all it is refused with 40100, and a
user without the permission with 40300 — the refusals come back over TLS, promptly.

Each client runs in a process of its own (official_tls_client.py): gRPC reads the CA
it trusts (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.auth import users_path
from rocketcluster.ctl.testing import LocalBroker, local_broker

CLIENT_SCRIPT = Path(__file__).with_name("official_tls_client.py")
TOPIC = "orders"
GROUP = "billing"


def secure_cluster(front_processes: int = 0) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "locked"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "frontProcesses": front_processes},
                "topics": [{"name": TOPIC, "queues": 2}],
                "consumerGroups": [{"name": GROUP}],
                "security": {"tls": {"enabled": True}, "auth": {"enabled": True}},
                "users": [
                    {
                        "name": "orders-app",
                        "permissions": [
                            {"topic": TOPIC, "actions": ["pub", "sub"]},
                            {"group": GROUP, "actions": ["sub"]},
                        ],
                    },
                    {"name": "auditor", "permissions": [{"topic": TOPIC, "actions": ["sub"]}]},
                ],
            },
        }
    )


# TLS and the signature check happen in the front processes when a broker has them.
@pytest.fixture(scope="module", params=[0, 2], ids=["single-process", "two-fronts"])
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBroker]:
    cluster = secure_cluster(request.param)
    with local_broker(cluster, tmp_path_factory.mktemp("tls-auth")) as handle:
        yield handle


def secret_of(broker: LocalBroker, name: str) -> str:
    found = UsersFile.load(users_path(broker.runtime.directory)).find(name)
    assert found is not None
    return found.secret_key


def official(broker: LocalBroker, *args: str, ak: str = "", sk: str = "") -> dict[str, Any]:
    ca = broker.state["tls"]["caFile"]
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)}
    done = subprocess.run(
        [sys.executable, str(CLIENT_SCRIPT), *args, f"--access-key={ak}", f"--secret-key={sk}"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_right_keys_over_tls_send_and_receive(broker: LocalBroker) -> None:
    result = official(
        broker,
        "roundtrip",
        broker.endpoints,
        TOPIC,
        GROUP,
        "10",
        ak="orders-app",
        sk=secret_of(broker, "orders-app"),
    )
    assert len(result["sent"]) == 10
    assert set(result["received"]) == set(result["sent"])


@pytest.mark.parametrize(
    ("ak", "sk_of", "reason"),
    [
        ("orders-app", None, "wrong secret key"),
        ("nobody", "orders-app", "unknown access key 'nobody'"),
        ("", None, "no access key"),
    ],
    ids=["wrong-secret-key", "unknown-access-key", "no-credentials"],
)
def test_wrong_or_missing_keys_over_tls_are_unauthorized(
    broker: LocalBroker, ak: str, sk_of: str | None, reason: str
) -> None:
    sk = secret_of(broker, sk_of) if sk_of else ("not-the-key" if ak else "")
    result = official(broker, "refused", broker.endpoints, TOPIC, GROUP, ak=ak, sk=sk)
    assert result["refused"] is not None, "the broker accepted a send it had to refuse"
    # Client 5.1.2 logs the refused route (40100 and the broker's reason), then raises
    # a generic "failed to fetch topic route".
    refusals = [line for line in result["logged"] if "40100" in line]
    assert refusals and all(reason in line for line in refusals), result


def test_a_user_without_pub_over_tls_is_forbidden(broker: LocalBroker) -> None:
    result = official(
        broker,
        "refused",
        broker.endpoints,
        TOPIC,
        GROUP,
        ak="auditor",
        sk=secret_of(broker, "auditor"),
    )
    assert (result["refused"], result["code"]) == ("ForbiddenException", 40300), result
