"""`make demo SECURE=1`: the cluster demo on a manifest with security on. The manifest
check asks for a user the demo can sign with (decided by the brokers' own rules), and
one real run — over TLS, signed with an application user's keys, the admin calls over
https with the admin token — tells the whole story and loses nothing.

The real run uses examples/secure.yaml made smaller (one controller, two groups of
two replicas: six processes instead of ten) to keep its cost near 30 s; the full
examples/secure.yaml is `make demo SECURE=1`'s and is checked here statically. It
runs as the console script, as a user runs it: the official client reads the CA it
trusts once per process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.ctl.demo_cluster import AUDIT_GROUP, DemoError, check_manifest
from rocketcluster.ctl.demo_security import demo_user
from rocketcluster.ctl.local.auth import users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import TOPIC

REPO = Path(__file__).resolve().parents[2]
ROCKETCTL = Path(sys.executable).parent / "rocketctl"
SECURE = REPO / "examples" / "secure.yaml"


def _cluster_document() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(SECURE.read_text()) if d]
    (cluster,) = [d for d in docs if d["kind"] == "RocketCluster"]
    return dict(cluster)


def _with_users(users: list[dict[str, Any]], tls: bool = True) -> RocketCluster:
    doc = _cluster_document()
    doc["spec"]["users"] = users
    doc["spec"]["security"]["tls"]["enabled"] = tls
    return RocketCluster.model_validate(doc)


READER = {"name": "reader", "permissions": [{"topic": "orders", "actions": ["sub"]}]}
SENDER = {
    "name": "sender",
    "permissions": [
        {"topic": "ord*", "actions": ["pub", "sub"]},  # a prefix counts as the brokers count it
        {"group": "billing", "actions": ["sub"]},
    ],
}


def test_the_secure_example_can_run_the_demo_as_its_application_user() -> None:
    model = load_manifest(SECURE)
    assert model.spec.security.tls.enabled and model.spec.security.auth.enabled
    check_manifest(model, "examples/secure.yaml")
    user = demo_user(model, TOPIC, AUDIT_GROUP)
    assert user is not None and user.name == "orders-app" and not user.admin


def test_a_secure_manifest_without_a_user_for_the_demo_is_refused_with_what_to_add() -> None:
    with pytest.raises(DemoError) as refused:
        check_manifest(_with_users([READER, SENDER]), "mine.yaml")
    message = str(refused.value)
    assert message.startswith("mine.yaml cannot run the cluster demo: security.auth is on")
    assert "a user allowed pub and sub on topic 'orders' and sub on consumer group 'audit'" in (
        message
    )
    # what each user lacks, so the fix is obvious
    assert "reader lacks pub on topic orders, sub on group audit" in message
    assert "sender lacks sub on group audit" in message
    assert message.endswith("(examples/secure.yaml can)")
    with pytest.raises(DemoError, match=r"spec\.users is empty"):
        check_manifest(_with_users([]), "mine.yaml")


def test_an_admin_is_the_fallback_and_tls_alone_needs_no_user() -> None:
    ops = {"name": "ops", "admin": True}
    model = _with_users([READER, ops])
    check_manifest(model, "mine.yaml")
    chosen = demo_user(model, TOPIC, AUDIT_GROUP)
    assert chosen is not None and chosen.name == "ops"
    tls_only = _cluster_document()
    tls_only["spec"]["security"]["auth"]["enabled"] = False
    tls_only["spec"]["users"] = []
    model = RocketCluster.model_validate(tls_only)
    check_manifest(model, "tls.yaml")
    assert demo_user(model, TOPIC, AUDIT_GROUP) is None


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    directory: Path


@pytest.fixture(scope="module")
def secure_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One real run of the demo on a smaller secure.yaml (six processes)."""
    root = tmp_path_factory.mktemp("secure-demo")
    doc = _cluster_document()
    doc["spec"]["controller"]["replicas"] = 1
    doc["spec"]["brokers"]["replicas"] = 2
    manifest = root / "secure-small.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    directory = root / "cluster"
    try:
        done = subprocess.run(
            [str(ROCKETCTL), "demo", "cluster", "-f", str(manifest), "--dir", str(directory)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            check=False,
        )
        yield Run(done.returncode, done.stdout, done.stderr, directory)
    finally:
        LocalRuntime(directory).down()  # by pid, should the demo have left any
        shutil.rmtree(directory / "data", ignore_errors=True)


def test_the_secure_demo_fails_over_and_loses_nothing_over_tls_with_the_apps_keys(
    secure_demo: Run,
) -> None:
    out = secure_demo.stdout
    assert secure_demo.returncode == 0, out + secure_demo.stderr
    ca = secure_demo.directory / "tls" / "ca.crt"
    lines = out.splitlines()
    # the security line right after the ready line: TLS with the CA up made, auth, the user
    ready = next(i for i, line in enumerate(lines) if line.startswith("ready in "))
    assert lines[ready + 1] == (
        f"TLS on every port (CA {ca}) and auth on: producing and auditing as user "
        "orders-app; admin calls over https with the admin token"
    )
    assert ca.is_file() and users_path(secure_demo.directory).is_file()
    assert UsersFile.load(users_path(secure_demo.directory)).find("orders-app") is not None
    # the story as with examples/cluster.yaml: both groups' masters, a kill, an election
    assert re.search(
        r"^prod-broker-1: master prod-broker-1-\d \(epoch \d+\), SyncStateSet 2/2$",
        out,
        re.MULTILINE,
    )
    produced = re.search(
        r"^producing to topic orders with the official RocketMQ 5 Python client "
        r"\(2 producers\): ([\d,]+) acknowledged",
        out,
        re.MULTILINE,
    )
    assert produced and int(produced.group(1).replace(",", "")) > 0, out
    killed = re.search(r"^SIGKILL (prod-broker-0-\d), the master of prod-broker-0", out, re.M)
    elected = re.search(r"^new master (prod-broker-0-\d) serving after", out, re.MULTILINE)
    assert killed and elected and killed.group(1) != elected.group(1), out
    audited = re.search(r"^([\d,]+) acknowledged, ([\d,]+) read back .*, lost 0", out, re.M)
    assert audited, out
    acked, read = (int(g.replace(",", "")) for g in audited.groups())
    assert read >= acked >= int(produced.group(1).replace(",", ""))
    assert lines[-3] == "verdict: nothing lost: every acknowledged message was read back"
    assert lines[-1].startswith("  then .venv/bin/rocketctl console --dir .rocketcluster")
    assert secure_demo.stderr == "", secure_demo.stderr
    assert LocalRuntime(secure_demo.directory).running() == []
