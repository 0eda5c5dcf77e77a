"""``rocketctl bench drain`` for real, on its smallest case: a backlog on one group of a
two-group cluster, drained by the official SimpleConsumer. The figures must add up;
how fast is the benchmark's business, not the test's."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketcluster.ctl.bench.drain_bench import rows, run_drain_bench
from rocketcluster.ctl.cli import main

# The Python client picks each receive's group at random: with 200 messages (about 7
# receives of 32) none went to the drained group once in a fresh run (1 in 128); with
# 640 (20 or more receives) that is one in a million.
MESSAGES = 640


def test_the_drain_bench_breaks_a_drain_down(tmp_path: Path) -> None:
    result = run_drain_bench(tmp_path, messages=MESSAGES, cases=("one-group",))
    case = result["cases"]["one-group"]
    assert case["messages"] == sum(case["backlog"].values()) == MESSAGES
    assert case["acks"] >= MESSAGES  # one AckMessage per message, as the loop sends them
    # The backlog is on one group: receives the client sent to the other were
    # answered from it, and their acks passed back.
    assert case["cross_group_messages"] > 0
    assert case["acks_passed_on"] > 0
    assert case["empty_receives"] == 0
    per = case["per_message"]
    assert per["receive_ms"] > 0 and per["ack_ms"] > 0
    assert per["broker_ack_ms"] > 0
    assert case["client_cpu_us_per_msg"] > 0 and case["brokers_cpu_us_per_msg"] > 0
    assert [r["case"] for r in rows(result)] == ["one-group"]


def test_an_unknown_case_is_refused_with_the_choices(tmp_path: Path) -> None:
    answer = CliRunner().invoke(
        main, ["bench", "drain", "--cases", "sideways", "--work-dir", str(tmp_path)]
    )
    assert answer.exit_code == 2
    assert "sideways" in answer.output and "one-group-no-cross" in answer.output
    with pytest.raises(ValueError, match="unknown cases"):
        run_drain_bench(tmp_path, cases=("nope",))
