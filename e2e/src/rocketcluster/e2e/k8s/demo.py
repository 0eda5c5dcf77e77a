"""``make demo-operator``: the operator at work, told in a few lines.

Starts the API server emulator, the pod realiser and the real operator on this
machine, then does what a user does with kubectl: apply ``examples/cluster.yaml``
(Ready, masters), produce and consume with the official client through the group
Services, change the image (the ordered roll, under load, nothing lost), scale out
to three groups, scale back in (refused until the consumers caught up, then done),
and delete the cluster. Everything it started is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rocketcluster.ctl.testing import quiet_official_client
from rocketcluster.ctl.workload import consume, produce
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster


class Narrator:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.monotonic()

    def say(self, line: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.started:5.0f}s] {line}", flush=True)


def run(manifest: Path, crds: Path, directory: Path, say: Narrator) -> dict[str, Any]:
    shutil.rmtree(directory, ignore_errors=True)
    say.say(f"starting the API server emulator, the pod realiser and the operator ({directory})")
    backend = EmulatedBackend(directory, crds)
    cluster = OperatedCluster(backend, "prod")
    result: dict[str, Any] = {"directory": str(directory)}
    try:
        ready = steps.apply_until_ready(cluster, manifest)
        status = ready.status
        masters = ", ".join(f"{g['name']} -> {g['master']}" for g in status["groups"])
        say.say(
            f"kubectl apply -f {manifest}: {ready.applied}; Ready after {ready.seconds:.0f}s "
            f"(masters {status['masters']}: {masters}; controller leader member "
            f"{status['controller']['leader']})"
        )
        result["readySeconds"] = round(ready.seconds, 1)

        endpoints = cluster.endpoints()
        sent = produce(endpoints, 200)
        got = consume(endpoints, len(sent), group="billing")
        say.say(
            f"official client through the group Services: sent {len(sent)}, "
            f"received {len(set(got) & set(sent))}"
        )
        result["traffic"] = {"sent": len(sent), "received": len(set(got) & set(sent))}

        groups = [g["name"] for g in status["groups"]]
        say.say("changing spec.image under continuous official-client load: the roll begins")
        roll = steps.roll_image_under_load(cluster, groups, "0.1.1-demo")
        for line in roll.report.lines():
            say.say(line)
        say.say(
            f"roll done in {roll.seconds:.0f}s: acknowledged {roll.acknowledged}, lost "
            f"{roll.lost}; sends that failed even after the client's own retries: "
            f"{roll.send_errors}"
        )
        result["roll"] = {
            "seconds": round(roll.seconds, 1),
            "order": roll.report.lines(),
            "groups": {
                g.group: {
                    "seconds": round(g.took_s, 1),
                    "longestWithoutMasterSeconds": round(g.longest_without_master_s, 2),
                    "smallestSyncStateSet": g.smallest_sync_state_set,
                }
                for g in roll.report.groups.values()
            },
            "acknowledged": roll.acknowledged,
            "lost": roll.lost,
            "problems": roll.report.problems,
        }

        scaled = steps.scale_out(cluster, 3)
        say.say(
            f"spec.brokers.groups 2 -> 3: the third group has a master after "
            f"{scaled.seconds:.0f}s, no running pod restarted; a new producer sent "
            f"{len(scaled.on_new_group)} messages to it"
        )
        leaving = "prod-broker-2"
        warning = steps.scale_in_refused(cluster, 2)
        say.say(f"spec.brokers.groups 3 -> 2: refused for now — {warning}")
        drained = steps.drain_and_remove(cluster, leaving, scaled.on_new_group)
        say.say(
            f"consumers caught up on {leaving} ({drained.consumed} messages); the operator "
            f"removed it {drained.seconds:.0f}s later, keeping its volumes "
            f"({', '.join(drained.retained_claims)})"
        )
        result["scale"] = {
            "outSeconds": round(scaled.seconds, 1),
            "refusal": warning,
            "removedAfterSeconds": round(drained.seconds, 1),
        }

        deleted = steps.delete_cluster(cluster)
        say.say(
            f"kubectl delete rocketcluster prod: everything gone in {deleted.seconds:.0f}s but "
            f"the {len(deleted.claims_after)} volumes whenDeleted: Retain keeps"
        )
        ok = not roll.report.problems and roll.lost == 0
        result["verdict"] = "PASS" if ok else "FAIL"
        say.say(f"verdict: {result['verdict']}")
        return result
    finally:
        cluster.close()
        backend.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The operator at work, in a few lines.")
    parser.add_argument("-f", "--manifest", type=Path, default=Path("examples/cluster.yaml"))
    parser.add_argument("--crds", type=Path, default=Path("crds"))
    parser.add_argument("--dir", type=Path, default=Path(".rc-operator-demo"))
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    quiet_official_client()
    result = run(args.manifest, args.crds, args.dir, Narrator(quiet=args.json))
    if args.json:
        print(json.dumps(result, indent=2))
    sys.exit(0 if result.get("verdict") == "PASS" else 1)


if __name__ == "__main__":
    main()
