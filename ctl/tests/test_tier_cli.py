"""`rocketctl tier status` / `tier flush` and the AdminClient's tier calls against real
standalone broker processes (``rocketctl local``'s runtime) with tiered storage on a
directory under the cluster's ``--dir``: a broker holding messages it has not
uploaded, the flush, the per-queue table, the raw documents, a broker that does not
answer, a backend that fails (the tier's directory taken away), and a broker without
tiered storage. The lines themselves are checked on recorded documents too."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rocketcluster.api.client.admin import AdminClient, AdminError
from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl import tier_cli
from rocketcluster.ctl.cli import main
from rocketcluster.ctl.testing import LocalBroker, local_broker, wait_for

TOPIC = "orders"
QUEUES = 2
COUNT = 60
BODY = 500


def _cluster(name: str, tiered: bool, upload_every_s: float = 3600) -> RocketCluster:
    spec: dict[str, Any] = {
        "controller": {"replicas": 0},
        "brokers": {"groups": 1, "replicas": 1, "flush": "sync"},
        # No trace events (1 in 100 message ids by default): the counts below are the
        # topic's messages alone.
        "topics": [{"name": TOPIC, "queues": QUEUES, "trace": "off"}],
    }
    if tiered:
        # By default nothing is uploaded on its own for an hour: what is produced stays
        # pending until `tier flush`. A relative path: a directory under --dir.
        spec["tieredStorage"] = {
            "enabled": True,
            "backend": "posix",
            "posix": {"path": "tier"},
            "uploadBatchBytes": 1 << 30,
            "uploadIntervalSeconds": upload_every_s,
        }
    return RocketCluster.model_validate({"metadata": {"name": name}, "spec": spec})


def _produce(endpoints: str, count: int) -> None:
    async def send() -> None:
        async with LeanClient(endpoints) as client:
            batch = [
                OutgoingMessage(f"{i:06d}".encode().ljust(BODY, b"."), keys=[f"k{i}"])
                for i in range(count)
            ]
            for entry in await client.send(TOPIC, batch):
                assert entry.status.code == 20000, entry.status  # OK

    asyncio.run(send())


def _rocketctl(*args: str) -> Result:
    return CliRunner().invoke(main, ["tier", *args])


def _closed_port() -> str:
    """An address nothing listens at (a port the kernel just handed out and closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    directory = tmp_path_factory.mktemp("tiered")
    with local_broker(_cluster("tiered", tiered=True), directory) as broker:
        _produce(broker.endpoints, COUNT)
        with broker.admin() as admin:
            wait_for(
                lambda: admin.tier_status()["pendingMessages"] == COUNT,
                what="the broker to count the produced messages as pending",
            )
        yield broker


def _dir(broker: LocalBroker) -> str:
    return str(broker.runtime.directory)


def test_status_of_the_local_cluster_says_what_waits(tiered: LocalBroker) -> None:
    result = _rocketctl("status", "--dir", _dir(tiered))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    tier_dir = Path(_dir(tiered)).resolve() / "tier"
    assert lines[0] == (
        f"{tiered.name}: ok, uploading (master), posix:{tier_dir}, read policy NOT_IN_DISK"
    )
    lag = next(line for line in lines if line.startswith("  upload lag"))
    assert f"({COUNT} messages pending)" in lag and "KiB" in lag
    assert any(line.startswith("  in the tier  0 B in 0 segments, 0 queues") for line in lines)
    assert lines[-1] == "1 broker: 1 ok"
    assert len(lines) <= 8  # a few lines: people look before they read


def test_flush_uploads_and_the_queues_show_in_the_tier(tiered: LocalBroker) -> None:
    flushed = _rocketctl("flush", "--dir", _dir(tiered))
    assert flushed.exit_code == 0, flushed.output
    assert flushed.output.startswith(f"{tiered.name}: uploaded ")
    assert "segments" in flushed.output

    result = _rocketctl("status", "--dir", _dir(tiered), "--queues")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "(0 messages pending)" in next(ln for ln in lines if ln.startswith("  upload lag"))
    uploaded = next(ln for ln in lines if ln.startswith("  uploaded"))
    assert f"  uploaded     {COUNT} messages, " in uploaded and "0 errors" in uploaded
    header = next(
        i for i, ln in enumerate(lines) if ln.split()[:3] == ["topic", "queue", "offsets"]
    )
    rows = [ln.split() for ln in lines[header + 1 : header + 1 + QUEUES]]
    assert [r[:2] for r in rows] == [[TOPIC, str(q)] for q in range(QUEUES)]
    ends = [int(r[2].split("..")[1]) for r in rows]
    assert all(r[2].startswith("0..") for r in rows) and sum(ends) == COUNT
    assert all(r[-1] == "-" for r in rows)  # no holes
    this_year = time.strftime("%Y", time.gmtime())
    assert all(this_year in " ".join(r) for r in rows)  # the oldest store time, UTC


def test_json_prints_the_documents_as_the_brokers_answer(tiered: LocalBroker) -> None:
    result = _rocketctl("status", "--admin", tiered.admin_address, "--json")
    assert result.exit_code == 0, result.output
    (answer,) = json.loads(result.output)
    assert answer["broker"] == answer["admin"] == tiered.admin_address
    with tiered.admin() as admin:
        direct = admin.tier_status()
    doc = answer["tier"]
    assert doc.keys() == direct.keys()
    assert doc["enabled"] is True and doc["backend"] == direct["backend"]
    assert {"uploads", "reads", "remoteRetention", "queues"} <= doc.keys()


def test_an_unreachable_broker_is_a_line_and_exit_code_1(tiered: LocalBroker) -> None:
    gone = _closed_port()
    result = _rocketctl("status", "--admin", tiered.admin_address, "--admin", gone)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{tiered.admin_address}: ok, uploading")
    (down,) = [ln for ln in lines if ln.startswith(f"{gone}: ")]
    assert down.startswith(f"{gone}: UNREACHABLE: GET http://{gone}/v1/tier: the broker did not")
    assert lines[-1] == "2 brokers: 1 ok, 1 unreachable"
    assert "Traceback" not in result.output

    as_json = _rocketctl("status", "--admin", gone, "--json")
    assert as_json.exit_code == 1
    (answer,) = json.loads(as_json.output)
    assert answer["admin"] == gone and "did not answer" in answer["error"]

    flushed = _rocketctl("flush", "--admin", gone)
    assert flushed.exit_code == 1 and flushed.output.startswith(f"{gone}: UNREACHABLE: ")


def test_the_admin_client_speaks_the_tier_calls(tiered: LocalBroker) -> None:
    with tiered.admin() as admin:
        flushed = admin.tier_flush()
        assert flushed.uploading and flushed.segments == 0  # everything was uploaded
        run = admin.run_retention()
        assert run.deleted_segments >= 0 and run.held_by_tier >= 0
        assert run.commit_log_min_offset >= 0
        now = admin.queue_offset_for_time(TOPIC, 0, 0)
        assert now.offset == now.min_offset == 0 and now.max_offset > 0
        future = admin.queue_offset_for_time(TOPIC, 0, int(time.time() * 1000) + 3_600_000)
        assert future.offset == future.max_offset
        with pytest.raises(AdminError) as refused:
            admin.queue_offset_for_time(TOPIC, QUEUES, 0)
        assert refused.value.status == 404 and not refused.value.unreachable
    with AdminClient(_closed_port(), timeout=2) as gone, pytest.raises(AdminError) as exc:
        gone.tier_status()
    assert exc.value.unreachable and "the broker did not answer" in str(exc.value)


def test_a_failing_backend_makes_the_broker_unhealthy(tmp_path: Path) -> None:
    """The tier's directory taken away (an unmounted volume): the broker's own uploads
    fail, it reports the backend unhealthy with the error, and recovers when the
    directory is back."""
    cluster = _cluster("failing", tiered=True, upload_every_s=0.2)
    with local_broker(cluster, tmp_path / "d") as broker, broker.admin() as admin:
        tier = Path(broker.runtime.directory) / "tier"
        away = tier.with_name("tier-away")
        tier.rename(away)
        try:
            _produce(broker.endpoints, 10)
            wait_for(lambda: not admin.tier_status()["healthy"], what="the upload to fail")
            result = _rocketctl("status", "--dir", _dir(broker))
            assert result.exit_code == 1, result.output
            lines = result.output.splitlines()
            assert lines[0].startswith(f"{broker.name}: UNHEALTHY, uploading (master), posix:")
            assert lines[1].startswith("  last error   ") and len(lines[1]) > 20
            assert "(10 messages pending)" in lines[2]
            assert lines[-1] == "1 broker: 0 ok, 1 unhealthy"
            flushed = _rocketctl("flush", "--dir", _dir(broker))
            assert flushed.exit_code == 1, flushed.output
            assert flushed.output.startswith(f"{broker.name}: FAILED: the tier's backend failed")
        finally:
            away.rename(tier)
        wait_for(
            lambda: (s := admin.tier_status())["healthy"] and s["pendingMessages"] == 0,
            timeout=90,
            what="the uploads to catch up",
        )
        healthy = _rocketctl("status", "--dir", _dir(broker))
        assert healthy.exit_code == 0, healthy.output
        assert healthy.output.splitlines()[0].startswith(f"{broker.name}: ok, ")


def test_a_broker_without_tiered_storage(tmp_path: Path) -> None:
    with local_broker(_cluster("plain", tiered=False), tmp_path / "d") as broker:
        result = _rocketctl("status", "--dir", _dir(broker))
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [
            f"{broker.name}: tiered storage is off",
            "1 broker: 0 ok, 1 with tiered storage off",
        ]
        flushed = _rocketctl("flush", "--dir", _dir(broker))
        assert flushed.exit_code == 1
        assert "tiered storage is not enabled" in flushed.output
        with broker.admin() as admin:
            assert admin.tier_status() == {"enabled": False}
            with pytest.raises(AdminError) as refused:
                admin.tier_flush()
            assert refused.value.status == 409
            assert admin.run_retention().held_by_tier == 0


def test_without_a_local_cluster_it_says_what_to_give(tmp_path: Path) -> None:
    result = _rocketctl("status", "--dir", str(tmp_path))
    assert result.exit_code != 0
    assert "give --admin HOST:PORT" in result.output and "Traceback" not in result.output


# -- the lines, on recorded documents ---------------------------------------------------


def _document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "enabled": True,
        "backend": "s3://archive/tiered",
        "readPolicy": "NOT_IN_DISK",
        "uploading": False,
        "healthy": True,
        "lastError": "",
        "lagBytes": 5 * 1024 * 1024 + 300 * 1024,
        "lagSeconds": 200.4,
        "pendingMessages": 1234,
        "tierBytes": 3 * 1024**3,
        "segments": 1500,
        "uploads": {
            "segments": 1500,
            "messages": 2_000_000,
            "bytes": 3 * 1024**3,
            "adopted": 0,
            "errors": 2,
            "lastError": "",
        },
        "reads": {
            "reads": 40,
            "messages": 1280,
            "fetches": 3,
            "fetchedBytes": 3 << 20,
            "cacheBytes": 1 << 20,
            "cacheHits": 37,
            "fallbacks": 1,
            "errors": 1,
            "lastError": "",
        },
        "remoteRetention": {"hours": 720.0, "deletedSegments": 12},
        "queues": [
            {
                "topic": "orders",
                "queueId": 3,
                "startOffset": 100,
                "committedOffset": 20_100,
                "segments": 7,
                "bytes": 700 * 1024,
                "oldestStoreTime": 1_700_000_000_000,
                "holes": [[150, 160], [170, 171], [180, 190], [200, 201]],
            }
        ],
    }
    doc.update(changes)
    return doc


def _answer(doc: dict[str, Any] | None, error: str | None = None) -> tier_cli.TierAnswer:
    return tier_cli.TierAnswer(tier_cli.Target("prod-broker-0-1", "10.0.0.7:8080"), doc, error)


def test_the_lines_of_a_slave() -> None:
    assert tier_cli.broker_lines(_answer(_document()), with_queues=True) == [
        "prod-broker-0-1: ok, not uploading (slave), s3://archive/tiered, read policy NOT_IN_DISK",
        "  upload lag   5.29 MiB, 3 min 20 s (1,234 messages pending)",
        "  in the tier  3.00 GiB in 1,500 segments, 1 queue; remote retention 720 h "
        "(12 segments deleted)",
        "  uploaded     2,000,000 messages, 3.00 GiB in 1,500 segments; 2 errors",
        "  cold reads   40 (1,280 messages), 3 fetches (3.00 MiB), 37 cache hits; "
        "1 fallback, 1 error",
        "  topic   queue  offsets     segments     size  oldest (UTC)         holes",
        "  orders      3  100..20100         7  700 KiB  2023-11-14 22:13:20  "
        "150..160,170..171,180..190 (+1)",
    ]


def test_a_slave_that_never_uploaded_has_no_upload_line() -> None:
    never = {"segments": 0, "messages": 0, "bytes": 0, "adopted": 0, "errors": 0, "lastError": ""}
    lines = tier_cli.broker_lines(_answer(_document(uploads=never)))
    assert [ln.split()[0] for ln in lines[1:]] == ["upload", "in", "cold"]


def test_an_unhealthy_master_shows_its_last_error_first() -> None:
    doc = _document(uploading=True, healthy=False, lastError="PutObject: AccessDenied")
    lines = tier_cli.status_lines([_answer(doc), _answer(None, "no answer")])
    assert lines[0].startswith("prod-broker-0-1: UNHEALTHY, uploading (master), s3://")
    assert lines[1] == "  last error   PutObject: AccessDenied"
    assert lines[-2] == "prod-broker-0-1: UNREACHABLE: no answer"
    assert lines[-1] == "2 brokers: 0 ok, 1 unhealthy, 1 unreachable"


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0 s"), (0.25, "0.2 s"), (12.4, "12 s"), (200, "3 min 20 s"), (7500, "2 h 5 min")],
)
def test_durations(value: float, text: str) -> None:
    assert tier_cli.seconds(value) == text


def test_the_empty_tier_says_so_in_the_table() -> None:
    assert tier_cli.queue_table([]) == ["(no queue has data in the tier yet)"]


def test_no_broker_in_a_cluster_without_brokers(tmp_path: Path) -> None:
    """A directory whose state lists no broker (a controllers-only cluster)."""
    state = {"name": "c", "processes": [{"role": "controller", "addresses": {"admin": "x"}}]}
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    result = _rocketctl("status", "--dir", str(tmp_path))
    assert result.exit_code != 0 and "has no broker" in result.output
