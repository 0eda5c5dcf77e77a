"""`rocketctl demo cluster` (what `make demo` runs): a replicated cluster at work.

Starts examples/cluster.yaml (three controllers, two broker groups of three replicas,
the group endpoints), produces with the official client, kills the master of a group
with SIGKILL, and shows the election from the controllers' history, what the
producers saw, and an audit of every acknowledged message - then stops everything.
Each step is told as it happens (``say``); the report returned is what ``--json``
prints. With examples/secure.yaml (``make demo SECURE=1``) the same story runs over
TLS, signed with an application user's keys (demo_security.py).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketcluster.api.client.controller_admin import ControllerAdminError
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.ctl import demo_text as text
from rocketcluster.ctl.client_errors import ClientErrorTally, capture_client_errors
from rocketcluster.ctl.demo_security import DemoAccess, prepare_access, security_problems
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import TOPIC, Cluster, Workload, audit

PRODUCERS = 2
AUDIT_GROUP = "audit"


class DemoError(ValueError):
    """A manifest the demo cannot tell its story with, and what to change."""


def check_manifest(model: RocketCluster, source: str) -> None:
    """The demo kills a master and expects another replica to take over, sends to
    ``orders`` and reads back with the consumer group ``audit`` — with security.auth,
    as a user allowed to."""
    problems = []
    if model.spec.brokers.replicas < 2:
        problems.append("brokers.replicas must be 2 or more (a killed master needs a successor)")
    if model.spec.brokers.groups < 1:
        problems.append("brokers.groups must be 1 or more")
    if TOPIC not in {t.name for t in model.spec.topics}:
        problems.append(f"declare the topic {TOPIC!r} in spec.topics")
    if AUDIT_GROUP not in {g.name for g in model.spec.consumer_groups}:
        problems.append(f"declare the consumer group {AUDIT_GROUP!r} in spec.consumerGroups")
    problems += security_problems(model, TOPIC, AUDIT_GROUP)
    if problems:
        security = model.spec.security
        example = "secure" if security.auth.enabled or security.tls.enabled else "cluster"
        raise DemoError(
            f"{source} cannot run the cluster demo: "
            + "; ".join(problems)
            + f" (examples/{example}.yaml can)"
        )


def _silent(_: str) -> None:
    """``say`` for ``--json``: the report alone."""


def _events_since(cluster: Cluster, since: float) -> list[dict[str, Any]]:
    """The group's history since ``since`` from any controller (it is replicated)."""
    with cluster.controller_admin() as admin:
        try:
            return admin.events(since, cluster.group, any_member=True)
        except ControllerAdminError:
            return []


def _group_state(cluster: Cluster, replicas: int) -> dict[str, Any]:
    """Master name, epoch and SyncStateSet size of ``cluster.group`` as the
    controllers' leader sees it (the master as its own admin API says)."""
    view = cluster.group_view() or {}
    master = cluster.master()
    return {
        "group": cluster.group,
        "master": master["name"],
        "masterEpoch": view.get("masterEpoch"),
        "inSync": len(view.get("syncStateSet", [])),
        "replicas": replicas,
    }


def _problems(acknowledged: int, lost: int, recovery: float | None) -> list[str]:
    found = []
    if acknowledged == 0:
        found.append("the producers got no acknowledgement at all")
    if lost:
        found.append(f"{lost:,} acknowledged messages were not read back")
    if recovery is None:
        found.append("no send to the killed master's group succeeded after the kill")
    return found


def _masters(
    runtime: LocalRuntime, state: dict[str, Any], replicas: int, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Each group's master once its SyncStateSet is full, told group by group."""
    groups = []
    for name in state["groupEndpoints"]:
        group = Cluster(runtime, state, group=name)
        group.master()
        group.wait_in_sync(replicas)
        g = _group_state(group, replicas)
        say(text.group_line(name, g["master"], g["masterEpoch"] or 0, g["inSync"], replicas))
        groups.append(g)
    return groups


def _security_line(access: DemoAccess, directory: Path) -> str | None:
    """The security line, the CA named under the directory as the user gave it."""
    ca = access.ca_file
    if ca is not None and ca.is_relative_to(directory.resolve()):
        ca = directory / ca.relative_to(directory.resolve())
    user = access.user
    return text.security_line(
        None if ca is None else str(ca),
        None if user is None else user.name,
        admin=user is not None and user.admin,
    )


def _election_after(cluster: Cluster, since: float) -> dict[str, Any] | None:
    """The controllers' record of the election that followed the kill."""
    elections = [e for e in _events_since(cluster, since) if e["command"] == "ElectMaster"]
    return elections[-1] if elections else None


@dataclass
class Failover:
    """What one kill under load left: the producers' record, the client library's
    complaints, the report's failover fields, and when sends to the group resumed."""

    workload: Workload
    client_errors: ClientErrorTally
    report: dict[str, Any]
    recovery: float | None  # None: no send to the group succeeded after the kill


def _failover(
    runtime: LocalRuntime,
    cluster: Cluster,
    replicas: int,
    seconds: float,
    access: DemoAccess,
    say: Callable[[str], None],
) -> Failover:
    """Produce, SIGKILL the group's master, produce on: what the controllers, the
    producers and the official client library saw."""
    old = cluster.master()
    with capture_client_errors() as client_errors:
        workload = Workload(
            access.official_endpoints(cluster.endpoints), access.credentials, access.official_tls
        )
        workload.start(producers=PRODUCERS)
        try:
            time.sleep(seconds)
            say(text.produced_line(PRODUCERS, TOPIC, len(workload.acked), seconds))
            killed_at = time.time()
            runtime.kill(old["name"])
            say(text.killed_line(old["name"], cluster.group))
            new = cluster.master(exclude={old["name"]})
            elected_after = time.time() - killed_at
            election = _election_after(cluster, killed_at)
            say(
                text.elected_line(
                    new["name"],
                    elected_after,
                    election.get("masterEpoch") if election else None,
                    election.get("reason", "") if election else "",
                )
            )
            time.sleep(seconds)
        finally:
            workload.stop()
    after = _group_state(cluster, replicas)
    recovery: float | None = workload.recovery_after(killed_at, cluster.group)
    if recovery == float("inf"):
        recovery = None
    failed = [f for f in workload.failures if f >= killed_at]
    send_kinds = {
        key.split(" ", 1)[1]: n
        for key, n in client_errors.counts.items()
        if key.startswith("send ")
    }
    say(text.failed_sends_line(len(failed), recovery, send_kinds))
    say(
        text.group_line(
            cluster.group, after["master"], after["masterEpoch"] or 0, after["inSync"], replicas
        )
        + f" ({old['name']} stays down)"
    )
    report = {
        "killed": {"name": old["name"], "signal": "SIGKILL"},
        "newMaster": new["name"],
        "election": election,
        "newMasterServingAfterSeconds": round(elected_after, 2),
        "groupAfterFailover": after,
        "clientRecoverySeconds": None if recovery is None else round(recovery, 2),
        "acknowledged": len(workload.acked),
        "clientErrorsDuringFailover": len(failed),
        "clientErrorKinds": send_kinds,
    }
    return Failover(workload, client_errors, report, recovery)


def run_cluster_demo(
    manifest: Path,
    directory: Path,
    seconds: float = 3.0,
    *,
    say: Callable[[str], None] = _silent,
) -> dict[str, Any]:
    """Start, show the masters, fail one over under load, audit, stop: each step told
    through ``say`` as it happens; the report (what ``--json`` prints) returned."""
    model = load_manifest(manifest)
    check_manifest(model, str(manifest))
    brokers = model.spec.brokers
    runtime = LocalRuntime(directory)
    runtime.down()
    shutil.rmtree(directory, ignore_errors=True)  # a fresh cluster every time
    say(
        text.starting_line(
            model.name,
            str(manifest),
            model.spec.controller.replicas,
            brokers.groups,
            brokers.replicas,
        )
    )
    started = time.monotonic()
    state = runtime.up(model)
    passed = False  # the data is removed after a run that passed (hundreds of MB of segments)
    try:
        took = time.monotonic() - started
        say(text.ready_line(len(state["processes"]), took, state["groupEndpoints"]))
        # Before the first official-client channel: it trusts the CA from then on.
        access = prepare_access(model, state, runtime.directory, TOPIC, AUDIT_GROUP)
        secured = _security_line(access, directory)
        if secured:
            say(secured)
        groups = _masters(runtime, state, brokers.replicas, say)
        cluster = Cluster(runtime, state)
        failover = _failover(runtime, cluster, brokers.replicas, seconds, access, say)
        workload = failover.workload
        seen = audit(
            cluster.endpoints,
            AUDIT_GROUP,
            set(workload.acked),
            tls=access.tls,
            credentials=access.credentials,
        )
        lost = sorted(set(workload.acked) - set(seen))
        twice = [mid for mid, places in seen.items() if len(places) > 1]
        say(text.audit_line(len(workload.acked), len(seen), len(lost), len(twice)))
        client_errors = failover.client_errors
        library = text.client_library_line(
            client_errors.counts, client_errors.levels, client_errors.log_file
        )
        if library:
            say(library)
        problems = _problems(len(workload.acked), len(lost), failover.recovery)
        passed = not problems
        return {
            "cluster": state["name"],
            "processes": len(state["processes"]),
            "groupEndpoints": state["groupEndpoints"],
            "security": {
                "tls": access.ca_file is not None,
                "caFile": None if access.ca_file is None else str(access.ca_file),
                "auth": access.user is not None,
                "user": None if access.user is None else access.user.name,
            },
            "groups": groups,
            **failover.report,
            "clientLibraryErrors": client_errors.report(),
            "audited": len(seen),
            "lost": len(lost),
            "lostExamples": lost[:5],
            "deliveredAtTwoOffsets": len(twice),
            "problems": problems,
            "verdict": "no acknowledged message lost" if not problems else "; ".join(problems),
        }
    finally:
        stopped = runtime.down()
        if passed:
            shutil.rmtree(directory / "data", ignore_errors=True)
        say(text.stopped_line(len(stopped), str(directory), data_removed=passed))
