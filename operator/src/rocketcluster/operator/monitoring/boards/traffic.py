"""What clients do: traffic, RPC latency and errors, and how far consumers trail."""

from __future__ import annotations

from typing import Any

from rocketcluster.operator.monitoring import alerts as rules
from rocketcluster.operator.monitoring.boards.common import (
    BROKER_VARS,
    RATE,
    cluster_variable,
    consumer_group_variable,
    group_variable,
    quantile,
    rate,
    topic_variable,
)
from rocketcluster.operator.monitoring.panels import Grid, Q, board, graph, v


def clients() -> dict[str, Any]:
    b = BROKER_VARS
    t = (*b, "topic")
    tg = (*t, "consumer_group")
    no_receive = 'request_code!="ReceiveMessage"'
    errors = 'response_code!~"20000|40401"'
    grid = (
        Grid()
        .add(
            graph(
                "Messages in by topic",
                "Messages produced per second.",
                "cps",
                Q(rate("rocketmq_messages_in_total", "topic", *t), "{{topic}}"),
            ),
            12,
        )
        .add(
            graph(
                "Bytes in by topic",
                "Message bytes produced per second.",
                "Bps",
                Q(rate("rocketmq_throughput_in_total", "topic", *t), "{{topic}}"),
            ),
            12,
        )
        .add(
            graph(
                "Messages out by consumer group",
                "Messages delivered per second.",
                "cps",
                Q(
                    rate("rocketmq_messages_out_total", "consumer_group, topic", *tg),
                    "{{consumer_group}} / {{topic}}",
                ),
            ),
            12,
        )
        .add(
            graph(
                "Bytes out by consumer group",
                "Message bytes delivered per second.",
                "Bps",
                Q(
                    rate("rocketmq_throughput_out_total", "consumer_group, topic", *tg),
                    "{{consumer_group}} / {{topic}}",
                ),
            ),
            12,
        )
        .add(
            graph(
                "RPC latency percentiles",
                "Latency of every client RPC but ReceiveMessage, which waits for messages "
                "by design (long polling).",
                "s",
                *(
                    Q(
                        quantile(q, "rocketmq_rpc_latency", "cluster", *b, extra=no_receive),
                        f"p{name}",
                    )
                    for q, name in ((0.5, "50"), (0.9, "90"), (0.99, "99"))
                ),
                steps=((0.1, "orange"), (1.0, "red")),
            ),
            12,
        )
        .add(
            graph(
                "RPC p99 by request",
                "99th percentile latency of each RPC.",
                "s",
                Q(quantile(0.99, "rocketmq_rpc_latency", "request_code", *b), "{{request_code}}"),
            ),
            12,
        )
        .add(
            graph(
                "Requests by RPC",
                "Client requests per second.",
                "reqps",
                Q(rate("rocketmq_rpc_latency_count", "request_code", *b), "{{request_code}}"),
            ),
            12,
        )
        .add(
            graph(
                "Errors by code",
                "Failed client requests per second, by RPC and response code (OK and "
                "no-new-message are not errors).",
                "reqps",
                Q(
                    rate(
                        "rocketmq_rpc_latency_count",
                        "request_code, response_code",
                        *b,
                        extra=errors,
                    ),
                    "{{request_code}} {{response_code}}",
                ),
                steps=((0.01, "red"),),
            ),
            12,
        )
        .add(
            graph(
                "Client connections",
                "Connections with RPCs in progress, per broker (spec.brokers.clientLimits."
                "maxConnections bounds each).",
                "short",
                Q(f"sum by (node_id) ({v('rocketmq_client_connections', *b)})", "{{node_id}}"),
            ),
            12,
        )
        .add(
            graph(
                "Refusals by client limit",
                "RPCs answered TOO_MANY_REQUESTS per second, by the clientLimits limit that "
                "refused them (a client holding too much, or too many connections).",
                "reqps",
                Q(rate("rocketmq_client_limit_refusals_total", "limit", *b), "{{limit}}"),
                steps=((0.01, "orange"),),
            ),
            12,
        )
    )
    return board(
        "rocketcluster-clients",
        "RocketCluster / Clients",
        "What producers and consumers send and receive, RPC latency and errors.",
        [cluster_variable(), group_variable(), topic_variable(), consumer_group_variable()],
        grid,
    )


def consumer_lag() -> dict[str, Any]:
    b = BROKER_VARS
    tg = (*b, "topic", "consumer_group")
    by = "consumer_group, topic"
    legend = "{{consumer_group}} / {{topic}}"
    grid = (
        Grid()
        .add(
            graph(
                "Lag (messages)",
                "Messages not yet acknowledged.",
                "short",
                Q(f"sum by ({by}) ({v('rocketmq_consumer_lag_messages', *tg)})", legend),
                steps=((1000.0, "orange"), (10000.0, "red")),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Lag (time)",
                "Age of the oldest message not yet acknowledged (the alert fires above "
                f"{rules.CONSUMER_LAG_SECONDS} s while it grows).",
                "s",
                Q(f"max by ({by}) ({v('rocketmq_consumer_lag_latency', *tg)})", legend),
                steps=((60.0, "orange"), (float(rules.CONSUMER_LAG_SECONDS), "red")),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "In flight and ready",
                "The lag split in two: in flight, delivered and invisible to other "
                "consumers until acknowledged or expired; ready, what a receive would be "
                "given now (never delivered, or visible again). Ready that stays high "
                "while consumers receive means they are not reaching it.",
                "short",
                Q(
                    f"sum by ({by}) ({v('rocketmq_consumer_inflight_messages', *tg)})",
                    "{{consumer_group}} / {{topic}} in flight",
                ),
                Q(
                    f"sum by ({by}) ({v('rocketmq_consumer_ready_messages', *tg)})",
                    "{{consumer_group}} / {{topic}} ready",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Receives answered by another group",
                "Messages a broker group delivered for receives that found nothing on the "
                "group the client asked (official clients pick a group per receive), and "
                "the acks passed back to the group that delivered them.",
                "cps",
                Q(
                    rate("rocketmq_cross_group_received_messages_total", "group, from_group", *b),
                    "{{group}} from {{from_group}}",
                ),
                Q(
                    rate("rocketmq_cross_group_passed_on_total", "group, to_group", *b),
                    "{{group}} passed on to {{to_group}}",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Dead-lettered messages",
                "Messages moved to a dead-letter queue after their last delivery attempt.",
                "short",
                Q(
                    f"sum by ({by}) (increase({v('rocketmq_send_to_dlq_messages_total', *tg)}"
                    f"[{RATE}]))",
                    legend,
                ),
                steps=((1.0, "red"),),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Produced and consumed",
                "Messages produced per topic against messages each consumer group receives.",
                "cps",
                Q(
                    rate("rocketmq_messages_in_total", "topic", *BROKER_VARS, "topic"),
                    "{{topic}} produced",
                ),
                Q(
                    rate("rocketmq_messages_out_total", by, *tg),
                    "{{consumer_group}} consumed {{topic}}",
                ),
            ),
            12,
        )
        .add(
            graph(
                "POP journal",
                "Consumption-state changes (receipts, acks, invisible-time changes) the "
                "master writes to the replicated POP journal, the puts that carry them "
                "(fewer puts than changes: the group commit), its checkpoints (every state "
                "at once, when a master takes over and every 10,000 records) and the "
                "records slaves apply.",
                "ops",
                Q(rate("rocketmq_pop_journal_ops_total", "node_id", *b), "{{node_id}} changes"),
                Q(rate("rocketmq_pop_journal_writes_total", "node_id", *b), "{{node_id}} puts"),
                Q(
                    rate("rocketmq_pop_journal_checkpoints_total", "node_id", *b),
                    "{{node_id}} checkpoints",
                ),
                Q(
                    rate("rocketmq_pop_journal_applied_total", "node_id", *b),
                    "{{node_id}} applied",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "POP state rebuilds and revived dead letters",
                "Rebuilds: a broker replayed the POP journal from its latest checkpoint "
                "because a failover cut the tail it had applied (rare; in slices, replication "
                "goes on; 'rebuilding' is 1 while one runs). "
                "Revived to DLQ: messages whose last delivery expired with nobody receiving.",
                "short",
                Q(
                    f"sum by (node_id) (increase({v('rocketmq_pop_journal_rebuilds_total', *b)}"
                    f"[{RATE}]))",
                    "{{node_id}} rebuilds",
                ),
                Q(
                    f"max by (node_id) ({v('rocketmq_pop_journal_rebuilding', *b)})",
                    "{{node_id}} rebuilding",
                ),
                Q(
                    f"sum by (node_id) (increase("
                    f"{v('rocketmq_pop_revive_dlq_messages_total', *b)}[{RATE}]))",
                    "{{node_id}} revived to DLQ",
                ),
                min_value=0,
            ),
            12,
        )
        .add(
            graph(
                "Delay messages waiting",
                "Scheduled messages not yet due, by broker.",
                "short",
                Q(
                    f"sum by (node_id) ({v('rocketmq_timer_pending_messages', *BROKER_VARS)})",
                    "{{node_id}}",
                ),
                min_value=0,
            ),
            12,
        )
    )
    return board(
        "rocketcluster-consumer-lag",
        "RocketCluster / Consumer lag",
        "How far each consumer group is behind, in messages and in time; in-flight and "
        "dead-lettered messages.",
        [cluster_variable(), group_variable(), topic_variable(), consumer_group_variable()],
        grid,
    )
