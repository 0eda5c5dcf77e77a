"""The chaos check of the brokers' logs reads the lines the brokers write (the same
format strings, through the same logging format), and fails a run only for a loop held
on CPU past the limit."""

from __future__ import annotations

import logging
from pathlib import Path

from rocketcluster.broker.loop_watchdog import BLOCK_MESSAGE
from rocketcluster.broker.messaging.pop_replay import (
    FROM_CHECKPOINT,
    FROM_START,
    REBUILD_MESSAGE,
    REBUILT_MESSAGE,
)
from rocketcluster.ctl.chaos.broker_logs import LOOP_BLOCK_LIMIT_CPU_S, read, summary_lines

# The log format of a broker process (broker/main.py).
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _log(path: Path, records: list[tuple[int, str, tuple[object, ...]]]) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger(f"test.broker_logs.{path.stem}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for level, message, args in records:
            logger.log(level, message, *args)
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_blocks_and_rebuilds_are_read_and_only_cpu_counts(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _log(
        logs / "chaos-broker-0-1.log",
        [
            (logging.INFO, "broker started", ()),
            (logging.WARNING, BLOCK_MESSAGE, (7.5, 0.02)),  # paused by a fault: no CPU
            (logging.INFO, REBUILD_MESSAGE, (FROM_CHECKPOINT, 120, 9)),
            (logging.INFO, REBUILT_MESSAGE, (0.04,)),
        ],
    )
    _log(
        logs / "chaos-broker-1-2.log",
        [
            (logging.INFO, REBUILD_MESSAGE, (FROM_START, 0, 104_000)),
            (logging.WARNING, BLOCK_MESSAGE, (33.1, 31.7)),  # seed 3's stall
            (logging.INFO, REBUILT_MESSAGE, (33.05,)),
        ],
    )
    (logs / "chaos-controller-0.log").write_text("not a broker's\n")
    found = read(logs)
    blocks, rebuilds = found["loop_blocks"], found["pop_rebuilds"]
    assert blocks["count"] == 2
    assert [(b["process"], b["cpu_s"]) for b in blocks["over_limit"]] == [
        ("chaos-broker-1-2", 31.7)
    ]
    assert blocks["longest"]["seconds"] == 33.1
    assert rebuilds["count"] == 2 and rebuilds["from_checkpoint"] == 1
    assert rebuilds["most_records"] == 104_000 and rebuilds["longest_s"] == 33.05
    text = "\n".join(summary_lines(found))
    assert "1 OVER" in text and "chaos-broker-1-2" in text
    assert "2 (1 from a checkpoint)" in text


def test_a_run_without_logs_or_blocks_passes(tmp_path: Path) -> None:
    found = read(tmp_path / "absent")
    assert found["loop_blocks"]["count"] == 0 and not found["loop_blocks"]["over_limit"]
    assert found["pop_rebuilds"]["count"] == 0
    assert "none over" in summary_lines(found)[0]
    assert LOOP_BLOCK_LIMIT_CPU_S == 3.0


def test_the_operated_soaks_pod_logs_are_read_too(tmp_path: Path) -> None:
    """The operated soak keeps its pods' logs as the emulator's kubelet wrote them:
    `<namespace>/<pod>_<container>.log`; only the broker containers' count."""
    logs = tmp_path / "logs"
    (logs / "chaos").mkdir(parents=True)
    _log(
        logs / "chaos" / "soak-broker-0-1_broker.log",
        [(logging.WARNING, BLOCK_MESSAGE, (4.2, 3.9))],
    )
    _log(
        logs / "chaos" / "soak-controller-0_controller.log",
        [(logging.WARNING, BLOCK_MESSAGE, (9.0, 9.0))],
    )
    blocks = read(logs)["loop_blocks"]
    assert blocks["count"] == 1
    assert [b["process"] for b in blocks["over_limit"]] == ["soak-broker-0-1_broker"]
