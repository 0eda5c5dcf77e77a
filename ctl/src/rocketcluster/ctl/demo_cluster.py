"""`rocketctl demo cluster` (what `make demo` runs): a replicated cluster at work.

Starts examples/cluster.yaml (three controllers, two broker groups of three replicas,
the group endpoints), produces with the official client, kills the master of a group
with SIGKILL, and shows the election from the controllers' history, the recovery time
the client saw, and an audit of every acknowledged message — then stops everything.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api.cluster import load_manifest
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import Cluster, Workload, audit


def _events_since(cluster: Cluster, since: float) -> list[dict[str, Any]]:
    for proc in cluster.controllers():
        try:
            events: list[dict[str, Any]] = httpx.get(
                f"http://{proc['addresses']['admin']}/v1/events",
                params={"since": since, "group": cluster.group},
                timeout=2,
            ).json()
            return events
        except (httpx.HTTPError, ValueError):
            continue
    return []


def run_cluster_demo(manifest: Path, directory: Path, seconds: float = 3.0) -> dict[str, Any]:
    runtime = LocalRuntime(directory)
    runtime.down()
    shutil.rmtree(directory, ignore_errors=True)  # a fresh cluster every time
    state = runtime.up(load_manifest(manifest))
    try:
        cluster = Cluster(runtime, state)
        old = cluster.master()
        cluster.wait_in_sync(3)
        workload = Workload(cluster.endpoints)
        workload.start(producers=2)
        time.sleep(seconds)
        killed_at = time.time()
        runtime.kill(old["name"])
        new = cluster.master(exclude={old["name"]})
        elected_after = time.time() - killed_at
        time.sleep(seconds)
        workload.stop()
        election = [e for e in _events_since(cluster, killed_at) if e["command"] == "ElectMaster"]
        seen = audit(cluster.endpoints, "audit", set(workload.acked))
        lost = sorted(set(workload.acked) - set(seen))
        twice = [mid for mid, places in seen.items() if len(places) > 1]
        return {
            "cluster": state["name"],
            "processes": len(state["processes"]),
            "groupEndpoints": state["groupEndpoints"],
            "killed": {"name": old["name"], "signal": "SIGKILL"},
            "newMaster": new["name"],
            "election": election[-1] if election else None,
            "newMasterServingAfterSeconds": round(elected_after, 2),
            "clientRecoverySeconds": round(workload.recovery_after(killed_at, cluster.group), 2),
            "acknowledged": len(workload.acked),
            "clientErrorsDuringFailover": len(workload.failures),
            "clientErrorKinds": dict(sorted(workload.errors.items(), key=lambda kv: -kv[1])[:5]),
            "audited": len(seen),
            "lost": len(lost),
            "deliveredAtTwoOffsets": len(twice),
            "verdict": "no acknowledged message lost" if not lost else "LOST MESSAGES",
        }
    finally:
        runtime.down()
