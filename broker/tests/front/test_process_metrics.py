"""Per-process CPU and memory of a broker's processes, read from /proc."""

from __future__ import annotations

import os

from rocketcluster.broker.front.metrics import parse_stat, process_usage

STAT = (
    "4242 (python -m rocketcluster) S 1 4242 4242 0 -1 4194560 9000 0 0 0 "
    "250 50 0 0 20 0 12 0 100 500000000 1000 18446744073709551615"
)


def test_a_stat_line_with_spaces_in_the_name() -> None:
    usage = parse_stat(STAT, ticks_per_second=100, page_bytes=4096)
    assert usage.cpu_seconds == 3.0
    assert usage.resident_bytes == 1000 * 4096


def test_this_process_reads_itself() -> None:
    usage = process_usage(os.getpid())
    assert usage is not None and usage.cpu_seconds > 0 and usage.resident_bytes > 0
    assert process_usage(2**22 + 12345) is None  # no such pid
