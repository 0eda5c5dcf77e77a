"""Metrics of the replicated POP consumption state (pop_journal.py, pop_replay.py,
revive.py): how often the master writes the journal and how many state changes those
writes carry (the ratio is the group commit at work), how many checkpoints it wrote,
how often a broker had to rebuild its consumption state (after a failover cut the tail
it had applied) and whether it is rebuilding now, and how many messages the revive
service dead-lettered.

All are counters the objects keep as plain integers, read when Prometheus scrapes: no
work on the receive / ack path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.pop import PopService
    from rocketcluster.broker.messaging.revive import PopReviveService
    from rocketcluster.broker.metrics import BrokerMetrics


def register_pop_metrics(metrics: BrokerMetrics, pop: PopService, revive: PopReviveService) -> None:
    metrics.counter(
        "rocketmq_pop_journal_writes_total",
        "Puts of POP journal records by this broker as master (each carries a batch of "
        "consumption-state changes and waits for replication once)",
        lambda: [({}, float(pop.journal.writes))],
    )
    metrics.counter(
        "rocketmq_pop_journal_ops_total",
        "Consumption-state changes (receipts, acks, invisible-time changes, FIFO locks, "
        "snapshots) written to the POP journal by this broker as master",
        lambda: [({}, float(pop.journal.ops_written))],
    )
    metrics.counter(
        "rocketmq_pop_journal_applied_total",
        "POP journal records this broker applied from the log (as a slave, at start and "
        "when promoted)",
        lambda: [({}, float(pop.replayer.applied))],
    )
    metrics.counter(
        "rocketmq_pop_journal_rebuilds_total",
        "Times this broker dropped its consumption state and replayed the POP journal "
        "from its latest checkpoint because the record it applied last was no longer "
        "in its log",
        lambda: [({}, float(pop.replayer.rebuilds))],
    )
    metrics.gauge(
        "rocketmq_pop_journal_rebuilding",
        "1 while this broker rebuilds its consumption state from the POP journal (it "
        "replays in slices, serving replication and heartbeats meanwhile), else 0",
        lambda: [({}, float(pop.replayer.rebuilding))],
    )
    metrics.counter(
        "rocketmq_pop_journal_checkpoints_total",
        "Checkpoints (every consumption state in one journal write) written by this "
        "broker as master: when it took over and every few thousand journal records",
        lambda: [({}, float(pop.journal.checkpoints))],
    )
    metrics.counter(
        "rocketmq_pop_revive_dlq_messages_total",
        "Messages the revive service moved to a dead-letter queue (their last delivery "
        "expired with nobody receiving); part of rocketmq_send_to_dlq_messages",
        lambda: [({}, float(revive.dead_lettered))],
    )
