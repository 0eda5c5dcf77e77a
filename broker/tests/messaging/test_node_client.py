"""The broker as the official Apache RocketMQ 5 Node.js client sees it (1.0.8,
``e2e/node/flows.mjs``): normal, FIFO, delay and recall, transactions, POP receive,
ack and change-invisible, retries into the dead-letter queue, tag filters — against
both shapes of a broker (one process; a store process behind two fronts)."""

from __future__ import annotations

import json
import subprocess

import pytest

from rocketcluster.ctl.testing import LocalBroker
from rocketcluster.e2e.drain import NODE_DIR, node_available

pytestmark = pytest.mark.slow

FLOWS = ("normal", "fifo", "delay", "transaction", "pop", "deadLetter", "filter")
TIMEOUT_S = 420


def test_node_client_flows(broker: LocalBroker) -> None:
    problem = node_available()
    if problem:
        pytest.fail(problem)
    done = subprocess.run(
        ["node", str(NODE_DIR / "flows.mjs"), json.dumps({"endpoints": broker.endpoints})],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["flow"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(results) == set(FLOWS), f"flows that printed nothing: {set(FLOWS) - set(results)}"
    failed = {name: r["detail"] for name, r in results.items() if not r["ok"]}
    assert not failed, "\n".join(f"{name}: {why}" for name, why in failed.items())
    for name in FLOWS:
        print(f"{name}: {results[name]['detail']} ({results[name]['seconds']:.1f} s)")
