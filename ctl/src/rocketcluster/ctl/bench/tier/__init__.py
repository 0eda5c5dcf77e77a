"""Tier benchmark: what tiered storage costs the producer, and how fast cold reads are,
each beside the local case measured in the same run on the same machine.

The machine is shared and noisy: the cases run interleaved, ``reps`` times each, and
medians and ratios of medians are reported — never a single run, never an absolute
claim.

``run`` runs it all; ``broker_case`` produces through a broker process,
``store_cases`` produces to and reads from an in-process store; ``report`` turns the
result into tables and words. ``settings``, ``backends`` and ``medians`` are what the
cases share.
"""

from rocketcluster.ctl.bench.tier.broker_case import BrokerLoad
from rocketcluster.ctl.bench.tier.report import (
    BROKER_COLUMNS,
    PRODUCE_COLUMNS,
    READ_COLUMNS,
    broker_table,
    produce_table,
    read_table,
    summary_lines,
)
from rocketcluster.ctl.bench.tier.run import run_tier_bench
from rocketcluster.ctl.bench.tier.settings import TierSettings

__all__ = [
    "BROKER_COLUMNS",
    "PRODUCE_COLUMNS",
    "READ_COLUMNS",
    "BrokerLoad",
    "TierSettings",
    "broker_table",
    "produce_table",
    "read_table",
    "run_tier_bench",
    "summary_lines",
]
