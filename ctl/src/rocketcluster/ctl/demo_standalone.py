"""`rocketctl demo standalone`: the product on one machine, with the official client.

Starts examples/standalone.yaml with the local runtime, produces messages with the
official Apache RocketMQ 5 Python client (``rocketmq-python-client``), consumes and
acknowledges them with its SimpleConsumer, shows what the admin API and /metrics
say, and stops the cluster — whatever happens in between. Each step is told as it
happens (``say``); the report returned is what ``--json`` prints.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketcluster.api.client.admin import AdminClient
from rocketcluster.api.cluster import load_manifest
from rocketcluster.ctl import demo_text as text
from rocketcluster.ctl.client_errors import capture_client_errors
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import consume, produce

TOPIC = "orders"
GROUP = "billing"


def _silent(_: str) -> None:
    """``say`` for ``--json``: the report alone."""


def run_standalone_demo(
    manifest: Path, directory: Path, count: int = 200, *, say: Callable[[str], None] = _silent
) -> dict[str, Any]:
    if count < 1:
        raise ValueError(f"count must be 1 or more, got {count}")
    model = load_manifest(manifest)
    brokers = model.spec.brokers
    runtime = LocalRuntime(directory)
    runtime.down()  # a leftover run of this directory
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
        endpoints = state["clientEndpoints"]
        say(
            text.ready_line(len(state["processes"]), time.monotonic() - started, {})
            + f"; clients connect to {endpoints}"
        )
        with capture_client_errors() as client_errors:
            started = time.monotonic()
            sent = produce(endpoints, count, TOPIC)
            produced_s = time.monotonic() - started
            say(text.standalone_produced_line(len(sent), TOPIC, produced_s))
            started = time.monotonic()
            received = consume(endpoints, len(sent), GROUP, TOPIC)
            consumed_s = time.monotonic() - started
        missing = sorted(set(sent) - set(received))
        say(text.standalone_consumed_line(len(received), GROUP, consumed_s, len(missing)))
        admin_address = state["processes"][0]["addresses"]["admin"]
        with AdminClient(admin_address) as admin:
            looked_up = admin.message(sent[0])[0]
            offsets = admin.offsets(GROUP)
            metrics = [
                line
                for line in admin.metrics().splitlines()
                if line.startswith(("rocketmq_messages_in_total", "rocketmq_messages_out_total"))
            ]
        say(
            text.standalone_lookup_line(
                looked_up["messageId"], looked_up["bodyText"], looked_up["keys"]
            )
        )
        for line in metrics:
            say(f"metric {line}")
        library = text.client_library_line(
            client_errors.counts, client_errors.levels, client_errors.log_file
        )
        if library:
            say(library)
        problems = [f"{len(missing):,} produced messages were not consumed"] if missing else []
        passed = not problems
        return {
            "cluster": state["name"],
            "clientEndpoints": endpoints,
            "processes": [
                {k: p[k] for k in ("name", "pid", "role", "addresses")} for p in state["processes"]
            ],
            "produced": len(sent),
            "produceSeconds": round(produced_s, 2),
            "consumedAndAcked": len(received),
            "consumeSeconds": round(consumed_s, 2),
            "missing": len(missing),
            "lookupById": {
                "messageId": looked_up["messageId"],
                "body": looked_up["bodyText"],
                "keys": looked_up["keys"],
            },
            "groupOffsets": offsets,
            "metrics": metrics,
            "clientLibraryErrors": client_errors.report(),
            "problems": problems,
            "verdict": "every produced message was consumed" if not missing else "MESSAGES MISSING",
        }
    finally:
        stopped = runtime.down()
        if passed:
            shutil.rmtree(directory / "data", ignore_errors=True)
        say(text.stopped_line(len(stopped), str(directory), data_removed=passed))
