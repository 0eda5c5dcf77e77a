"""A live local cluster for the console's browser tests, in the state the issue asks
for: three replicas with TLS and auth, orders produced (every one traced), the
billing group consuming with one message dead-lettered, the audit group stopped
after a few, and the console serving it as `rocketctl console` does — while the
official client keeps producing to orders and consuming as billing.

The official client runs in its own processes (``official_client_process.py``): it trusts the
cluster's CA through an environment variable gRPC reads once per process.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.console_cli import free_port, running_console
from rocketcluster.ctl.local.auth import local_admin_token, users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, stop_child, wait_for
from rocketcluster.ctl.workload import Cluster

CLIENT = Path(__file__).with_name("official_client_process.py")
ORDERS = 24
BIG_BODY = 4 * 1024 * 1024
NOT_UTF8 = b"\xff\xfe\x00binary\x80\x81"


def manifest() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "shop"},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {
                    "groups": 1,
                    "replicas": 3,
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                    "statsIntervalSeconds": 2,
                    "maxMessageBytes": 8 * 1024 * 1024,
                },
                "topics": [
                    {"name": "orders", "queues": 2, "trace": "all"},
                    {"name": "payments", "queues": 2},
                ],
                "consumerGroups": [
                    {"name": "billing", "maxDeliveryAttempts": 2},
                    {"name": "audit"},
                ],
                "security": {"tls": {"enabled": True}, "auth": {"enabled": True}},
                "users": [
                    {
                        "name": "shop-app",
                        "permissions": [
                            {"topic": "orders", "actions": ["pub", "sub"]},
                            {"group": "billing", "actions": ["sub"]},
                            {"group": "audit", "actions": ["sub"]},
                        ],
                    },
                    {
                        "name": "billing-viewer",
                        "permissions": [
                            {"topic": "orders", "actions": ["sub"]},
                            {"group": "billing", "actions": ["sub"]},
                        ],
                    },
                ],
            },
        }
    )


@dataclass
class Live:
    runtime: LocalRuntime
    cluster: Cluster
    url: str
    token: str
    keys: dict[str, str]  # access key -> secret key
    ids: dict[str, str] = field(default_factory=dict)  # message key -> message id
    console_pid: int = 0

    @property
    def directory(self) -> Path:
        return self.runtime.directory

    def _client_env(self, args: dict[str, Any]) -> tuple[dict[str, str], str]:
        tls = self.cluster.local.client_tls()
        assert tls is not None
        env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls.ca_file)}
        payload = {
            "endpoints": self.cluster.endpoints,
            "accessKey": "shop-app",
            "secretKey": self.keys["shop-app"],
            "topic": "orders",
            **args,
        }
        return env, json.dumps(payload) + "\n"

    def client(self, command: str, **args: Any) -> dict[str, Any]:
        """Run the official client once as shop-app; its JSON answer."""
        env, payload = self._client_env(args)
        done = subprocess.run(
            [sys.executable, str(CLIENT), command],
            input=payload,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return answer

    @contextmanager
    def steady(self, group: str = "billing") -> Iterator[subprocess.Popen[str]]:
        """The official client producing to orders and consuming as ``group`` in the
        background, stopped by its PID when the block ends."""
        env, payload = self._client_env({"group": group})
        proc = subprocess.Popen(
            [sys.executable, str(CLIENT), "steady"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(payload)
            proc.stdin.close()
            assert json.loads(proc.stdout.readline()) == {"started": True}
            yield proc
        finally:
            stop_child(proc, grace_s=30)

    def admin(self, path: str, **params: Any) -> Any:
        """GET on the master's admin API (the token, the cluster's CA)."""
        master = self.cluster.master()
        return self.cluster.admin_get(master["addresses"]["admin"], path, **params)


def _orders() -> list[dict[str, str]]:
    out = []
    for i in range(ORDERS):
        body = json.dumps({"order": i, "item": "rocket", "qty": i % 3 + 1}).encode()
        out.append({"key": f"order-{i}", "body": base64.b64encode(body).decode()})
    out.append({"key": "poison", "body": base64.b64encode(b'{"order": "poison"}').decode()})
    out.append({"key": "binary", "body": base64.b64encode(NOT_UTF8).decode()})
    out.append({"key": "big", "body": base64.b64encode(b"x" * BIG_BODY).decode()})
    return out


REPORT_RUN = "20260101T120042Z"


def sample_report(reports: Path) -> None:
    """A run as the health-report CronJob leaves it (the real renderer, on the
    sample results it previews with), and ``latest`` pointing at it."""
    from rocketcluster.jobs.report import render_report, write_report
    from rocketcluster.jobs.report.sample import SAMPLE_NOW, sample_results

    run = reports / REPORT_RUN
    run.mkdir(parents=True)
    html = render_report(
        sample_results(SAMPLE_NOW), {}, cluster="shop", generated_at_ms=SAMPLE_NOW + 42_000
    )
    write_report(run / "report.html", html)
    summary = {
        "lag": {"groups_by_status": {"OK": 3, "WARN": 0, "STOP": 1}},
        "sss-history": {"groups": [{"elections": 2, "unclean_elections": 1}, {"elections": 1}]},
        "tiering": {"segments": 12, "monthly_saving": 1.5},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (reports / "latest").symlink_to(REPORT_RUN)


@contextmanager
def live_cluster(directory: Path) -> Iterator[Live]:
    runtime = LocalRuntime(directory)
    state = runtime.up(manifest(), overrides={"segment_size": 32 << 20, **DISK_GUARDS_OFF})
    try:
        cluster = Cluster(runtime, state)
        cluster.master()
        cluster.wait_in_sync(3)
        token = local_admin_token(directory)
        assert token
        users = UsersFile.load(users_path(directory))
        keys = {u.access_key: u.secret_key for u in users.users}
        port = free_port()
        live = Live(runtime, cluster, f"http://127.0.0.1:{port}", token, keys)
        live.ids = live.client("produce", messages=_orders())["ids"]
        # billing: everything but "poison", which expires twice and is dead-lettered.
        live.client(
            "consume",
            group="billing",
            hold=["poison"],
            wantKeys=["poison"],
            minSeen=2,
            invisible=2,
            timeout=90,
        )
        wait_for(
            lambda: live.admin("/v1/groups/billing/dlq")["count"] >= 1,
            60,
            what="poison to reach billing's DLQ",
        )
        # audit: a few, then its consumer stops.
        live.client("consume", group="audit", stopAfter=5, timeout=60)
        sample_report(directory / "reports")
        with (
            running_console(directory, port, directory / "reports") as proc,
            live.steady("billing"),
        ):
            live.console_pid = proc.pid
            yield live
    finally:
        runtime.down()
