"""The master is SIGKILLed while it uploads; the new master continues every queue's
chain from what the backend confirms. Read back object by object, the tier holds each
queue's offsets once, without a gap, and every acknowledged message."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.catalog import group_root, parse_segment_name
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.broker.tiered.segment import decode_segment
from rocketcluster.ctl.testing import wait_for
from rocketcluster.ctl.workload import Workload, ha_cluster, running
from rocketcluster.e2e.s3server import S3Server

from .conftest import new_bucket, s3_backend_for

pytestmark = pytest.mark.slow


def _tiered_cluster(backend: str, where: dict[str, Any]) -> RocketCluster:
    cluster = ha_cluster(name="tierha")
    spec = cluster.model_dump(by_alias=True, exclude_none=True)
    spec["spec"]["tieredStorage"] = {
        "enabled": True,
        "backend": backend,
        backend: where,
        "uploadBatchBytes": 4096,  # small segments: an upload is nearly always running
        "uploadIntervalSeconds": 0.1,
    }
    return RocketCluster.model_validate(spec)


Offsets = dict[tuple[str, int], list[int]]


def _read_tier(backend: TierBackend, root: str) -> tuple[Offsets, set[str]]:
    """Every queue's offsets in the order of its objects, and every message id."""
    offsets: Offsets = {}
    ids: set[str] = set()
    for info in backend.list(root):
        parsed = parse_segment_name(root, info.name)
        assert parsed is not None, f"a stray object in the tier: {info.name}"
        header, messages = decode_segment(backend.get(info.name))
        assert (header.topic, header.queue_id, header.start) == parsed
        offsets.setdefault((header.topic, header.queue_id), []).extend(
            m.queue_offset for m in messages
        )
        ids.update(m.msg_id for m in messages)
    return offsets, ids


@pytest.fixture(params=["posix", "s3"])
def tier(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, Any], TierBackend]:
    """(backend, its manifest section, a backend to read the tier back with)."""
    if request.param == "posix":
        path = tmp_path / "tier"
        path.mkdir()
        return "posix", {"path": str(path)}, PosixBackend(path)
    server: S3Server = request.getfixturevalue("s3_server")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    bucket = new_bucket(server)
    where = {"endpoint": server.endpoint, "bucket": bucket, "prefix": "ha"}
    return "s3", where, s3_backend_for(server, bucket, prefix="ha")


def test_a_new_master_continues_the_tier_without_gap_or_duplicate(
    tier: tuple[str, dict[str, Any], TierBackend], tmp_path: Path
) -> None:
    name, where, backend = tier
    root = group_root("tierha", "tierha-broker-0")
    with running(tmp_path / "local", _tiered_cluster(name, where)) as cluster:
        workload = Workload(cluster.endpoints)
        workload.start(producers=2)
        try:
            wait_for(lambda: len(backend.list(root)) >= 20, 60, 0.1, "uploads under way")
            old = cluster.master()
            cluster.runtime.kill(old["name"])  # SIGKILL, mid-upload
            new = cluster.master(exclude={old["name"]})
            uploaded_then = len(backend.list(root))
            wait_for(
                lambda: len(backend.list(root)) > uploaded_then + 10,
                60,
                0.1,
                "the new master uploading",
            )
            time.sleep(1.0)
        finally:
            workload.stop()
        flushed = httpx.post(f"http://{new['addresses']['admin']}/v1/tier/flush", timeout=60)
        assert flushed.status_code == 200, flushed.text
        status = httpx.get(f"http://{new['addresses']['admin']}/v1/tier", timeout=10).json()
        assert status["uploading"] and status["pendingMessages"] == 0
    offsets, ids = _read_tier(backend, root)
    for (topic, qid), seen in offsets.items():
        assert seen == list(range(seen[0], seen[0] + len(seen))), (
            f"{topic}/{qid}: a gap or a duplicate in the tier"
        )
        assert seen[0] == 0
    acked = set(workload.acked)
    assert acked, "the producers got no acknowledgement"
    assert acked <= ids, f"{len(acked - ids)} acknowledged messages are not in the tier"
    writers = {decode_segment(backend.get(o.name))[0].writer for o in backend.list(root)}
    assert len(writers) >= 2  # both masters wrote segments
