"""`rocketctl demo standalone`: the product on one machine, with the official client.

Starts examples/standalone.yaml with the local runtime, produces messages with the
official Apache RocketMQ 5 Python client (``rocketmq-python-client``), consumes and
acknowledges them with its SimpleConsumer, shows what the admin API and /metrics
say, and stops the cluster — whatever happens in between.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from rocketcluster.api.client.admin import AdminClient
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import consume, produce

TOPIC = "orders"
GROUP = "billing"


def run_standalone_demo(manifest: Path, directory: Path, count: int = 200) -> dict[str, Any]:
    logging.getLogger("rocketmq").setLevel(logging.WARNING)
    runtime = LocalRuntime(directory)
    runtime.down()  # a leftover run of this directory
    state = runtime.up(manifest)
    try:
        endpoints = state["clientEndpoints"]
        started = time.monotonic()
        sent = produce(endpoints, count, TOPIC)
        produced_s = time.monotonic() - started
        started = time.monotonic()
        received = consume(endpoints, len(sent), GROUP, TOPIC)
        consumed_s = time.monotonic() - started
        admin_address = state["processes"][0]["addresses"]["admin"]
        with AdminClient(admin_address) as admin:
            looked_up = admin.message(sent[0])[0]
            offsets = admin.offsets(GROUP)
            metrics = [
                line
                for line in admin.metrics().splitlines()
                if line.startswith(("rocketmq_messages_in_total", "rocketmq_messages_out_total"))
            ]
        missing = sorted(set(sent) - set(received))
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
            "verdict": "every produced message was consumed" if not missing else "MESSAGES MISSING",
        }
    finally:
        runtime.down()
