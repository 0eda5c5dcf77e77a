"""The tier benchmark, tiny: every case runs, in-process and through a broker process,
the uploader uploads while the producer runs, the tier ends up holding every record, and
every read reads every message. Behaviour, not speed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketcluster.ctl.bench import tier
from rocketcluster.ctl.bench.results import format_table

pytestmark = pytest.mark.slow

MESSAGES = 1000


def test_the_tier_bench_measures_every_case(tmp_path: Path) -> None:
    bench = tier.run_tier_bench(
        tmp_path,
        0.8,
        messages=MESSAGES,
        reps=1,
        writers=1,
        load=tier.BrokerLoad(seconds=4.0, senders=2, warmup_s=1.0),
        settings=tier.TierSettings(upload_batch_bytes=1 << 20, upload_interval_s=0.1),
    )
    result = asyncio.run(bench)

    through = {row["case"]: row for row in result["broker_produce"]["cases"]}
    assert list(through) == ["off", "posix", "s3"]
    for kind, row in through.items():
        assert row["messages"] > 0 and row["failed"] == 0, (kind, row["failures"])
        assert row["stored_messages"] >= row["messages"]
        assert row["broker_cpu"] > 0
    for kind in ("posix", "s3"):
        row = through[kind]
        # the broker's uploader worked while the client sent, and after the flush its
        # tier holds every message the broker stored
        assert row["uploaded_segments_during_run"] > 0, kind
        assert row["uploaded_bytes_during_run"] > 0
        assert row["tier_messages"] == row["stored_messages"]
        assert row["upload_errors"] == 0
        assert isinstance(row["slowdown"], float)
    assert set(result["broker_produce"]["uploader_slowdown"]) == {"posix", "s3"}

    produce = {row["case"]: row for row in result["produce"]}
    assert list(produce) == ["none", "posix", "s3"]
    assert produce["none"]["records"] > 0
    for kind in ("posix", "s3"):
        row = produce[kind]
        assert row["records"] > 0
        # the uploader worked while the producer ran (the rest came after, checked
        # by the bench: it raises unless the tier holds every record)
        assert row["uploaded_segments_during_run"] > 0
        assert 0 < row["uploaded_fraction_during_run"] <= 1
        assert row["segments_in_tier"] >= row["uploaded_segments_during_run"]
        assert isinstance(row["slowdown"], float)
    assert set(result["uploader_slowdown"]) == {"posix", "s3"}

    reads = {row["case"]: row for row in result["read"]["cases"]}
    assert list(reads) == ["local", "posix", "s3", "local-warm"]
    for case, row in reads.items():
        assert row["messages"] == MESSAGES, case
        assert row["messages_per_s"] > 0
    for kind in ("posix", "s3"):
        assert result["read"]["uploads"][kind]["messages"] == MESSAGES
        assert reads[kind]["fetches"] == reads[kind]["segments"] > 0  # each fetched once
    assert reads["local"]["ratio_to_local"] == 1.0

    assert "cpu_ms_per_mb" in format_table(tier.broker_table(result), tier.BROKER_COLUMNS)
    assert "slowdown" in format_table(tier.produce_table(result), tier.PRODUCE_COLUMNS)
    assert "ratio_to_local" in format_table(tier.read_table(result), tier.READ_COLUMNS)
    lines = tier.summary_lines(result)
    assert lines[0].startswith("through a broker: uploader slowdown posix ")
    assert any(
        line.startswith("in-process store at saturation, uploader on threads (the worst case)")
        for line in lines
    )
    assert list(tmp_path.iterdir()) == []  # the work directory is cleaned up


def test_a_tiered_run_lasts_until_an_upload_finished_in_it(tmp_path: Path) -> None:
    # A run shorter than any upload (here: none at all) would measure the store alone,
    # as a starved machine did with 0.8 s: the run goes on until the uploader wrote.
    from rocketcluster.broker.tiered.posix import PosixBackend
    from rocketcluster.ctl.bench.tier.store_cases import produce_case

    settings = tier.TierSettings(upload_batch_bytes=1 << 20, upload_interval_s=0.1)
    (tmp_path / "tier").mkdir()
    row = asyncio.run(
        produce_case(
            tmp_path / "store",
            0.0,
            writers=1,
            tier=("posix", PosixBackend(tmp_path / "tier")),
            settings=settings,
        )
    )
    assert row["uploaded_segments_during_run"] > 0
    assert row["records"] > 0 and row["seconds"] > 0
