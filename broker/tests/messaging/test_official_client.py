"""The broker as the official Apache RocketMQ 5 Python client sees it: a real broker
process, the unmodified ``rocketmq-python-client``."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from rocketmq.grpc_protocol import FilterType, TransactionResolution
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer, SimpleConsumer
from rocketmq.v5.exception import IllegalArgumentException, NotFoundException
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import TransactionChecker

from rocketcluster.ctl.testing import LocalBroker, wait_for

from .conftest import config, message, producer, simple_consumer

pytestmark = pytest.mark.slow


def drain(
    consumer: SimpleConsumer, want: int, timeout: float = 30, ack: bool = True
) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.receive(32, 10):
            got.append(msg)
            if ack:
                consumer.ack(msg)
    return got


def test_producer_sync_and_async(broker: LocalBroker) -> None:
    with producer(broker, "plain", "plain-async") as p:
        receipt = p.send(message("plain", b"sync", tag="a", keys="k-sync"))
        assert receipt.message_id and receipt.offset >= 0
        futures = [p.send_async(message("plain-async", f"async-{i}".encode())) for i in range(50)]
        ids = {f.result(timeout=30).message_id for f in futures}
        assert len(ids) == 50
    with broker.admin() as admin:
        [found] = admin.message(receipt.message_id)
        assert found["bodyText"] == "sync" and found["keys"] == ["k-sync"] and found["tag"] == "a"
        offsets = admin.topic("plain-async")["queueOffsets"]
        assert sum(q["maxOffset"] for q in offsets) == 50


def test_simple_consumer_receive_ack_and_change_invisible(broker: LocalBroker) -> None:
    with producer(broker, "simple") as p:
        sent = {
            p.send(message("simple", f"s{i}".encode(), keys=f"key{i}")).message_id
            for i in range(10)
        }
    with simple_consumer(broker, "g-simple", "simple") as c:
        first = drain(c, 10, ack=False)
        assert {m.message_id for m in first} == sent
        assert all(m.delivery_attempt == 1 for m in first)
        keep, rest = first[0], first[1:]
        for msg in rest:
            c.ack(msg)
        # Make one visible again at once: it comes back with attempt 2.
        c.change_invisible_duration(keep, 1)
        again = wait_for(lambda: c.receive(1, 10), timeout=30, what="redelivery")
        assert again[0].message_id == keep.message_id and again[0].delivery_attempt == 2
        c.ack(again[0])
        assert c.receive(32, 5) == []


class Collector(MessageListener):  # type: ignore[misc]
    def __init__(self, fail_first: int = 0) -> None:
        self.lock = threading.Lock()
        self.seen: list[Message] = []
        self.fail_first = fail_first
        self.attempts: dict[str, int] = defaultdict(int)

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.seen.append(message)
            self.attempts[message.message_id] += 1
            if self.attempts[message.message_id] <= self.fail_first:
                return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


def push_consumer(broker: LocalBroker, group: str, topic: str, listener: Collector) -> PushConsumer:
    consumer = PushConsumer(config(broker.endpoints), group, listener, {topic: FilterExpression()})
    consumer.startup()
    return consumer


def test_push_consumer_concurrent(broker: LocalBroker) -> None:
    listener = Collector()
    consumer = push_consumer(broker, "g-push", "push", listener)
    try:
        with producer(broker, "push") as p:
            sent = {p.send(message("push", f"p{i}".encode())).message_id for i in range(40)}
        wait_for(lambda: sent <= {m.message_id for m in listener.seen}, what="all 40 messages")
    finally:
        consumer.shutdown()


def test_push_consumer_fifo_keeps_group_order(broker: LocalBroker) -> None:
    listener = Collector()
    consumer = push_consumer(broker, "g-fifo", "ordered", listener)
    try:
        with producer(broker, "ordered") as p:
            for i in range(30):
                for g in ("A", "B", "C"):
                    p.send(message("ordered", f"{g}{i}".encode(), message_group=g))
        wait_for(lambda: len(listener.seen) >= 90, what="90 FIFO messages")
        for g in ("A", "B", "C"):
            bodies = [m.body.decode() for m in listener.seen if m.message_group == g]
            assert bodies == [f"{g}{i}" for i in range(30)]
    finally:
        consumer.shutdown()


def test_fifo_order_kept_across_retries(broker: LocalBroker) -> None:
    listener = Collector(fail_first=2)  # every message fails twice, then succeeds
    consumer = push_consumer(broker, "g-fifo-retry", "ordered-retry", listener)
    try:
        with producer(broker, "ordered-retry") as p:
            for i in range(6):
                p.send(message("ordered-retry", f"m{i}".encode(), message_group="only"))
        wait_for(lambda: len(listener.seen) >= 18, timeout=60, what="3 attempts of 6 messages")
        bodies = [m.body.decode() for m in listener.seen]
        # Each message is retried in place before the next one is touched.
        assert bodies == [f"m{i}" for i in range(6) for _ in range(3)]
    finally:
        consumer.shutdown()


def test_delay_message_not_early_and_recall(broker: LocalBroker) -> None:
    with producer(broker, "later") as p:
        due = int(time.time() * 1000) + 3000
        receipt = p.send(message("later", b"on time", delivery_timestamp=due))
        recalled = p.send(
            message("later", b"never", delivery_timestamp=int(time.time() * 1000) + 4000)
        )
        assert recalled.recall_handle
        assert p.recall_message("later", recalled.recall_handle) == recalled.message_id
        with pytest.raises(NotFoundException):
            p.recall_message("later", recalled.recall_handle)
    with simple_consumer(broker, "g-later", "later") as c:
        got = drain(c, 1, timeout=30)
        arrived = time.time() * 1000
        assert [m.message_id for m in got] == [receipt.message_id]
        assert arrived >= due
        assert got[0].delivery_timestamp  # the delivery time travels with the message
        assert c.receive(32, 6) == []  # the recalled one never comes


class Checker(TransactionChecker):  # type: ignore[misc]
    """Answers what the test decided, and "don't know yet" for everything else."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        self.decisions: dict[str, TransactionResolution] = {}

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.message_id)
        return self.decisions.get(
            message.message_id, TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        )


def test_transactions_commit_rollback_and_orphan_check(broker: LocalBroker) -> None:
    checker = Checker()
    with producer(broker, "txn", "txn-orphan", checker=checker) as p:
        t1 = p.begin_transaction()
        committed = p.send(message("txn", b"commit me"), t1)
        t2 = p.begin_transaction()
        p.send(message("txn", b"roll me back"), t2)
        with simple_consumer(broker, "g-txn", "txn") as c:
            assert c.receive(32, 3) == []  # halves are invisible
            t1.commit()
            t2.rollback()
            got = drain(c, 1)
            assert [m.message_id for m in got] == [committed.message_id]
            assert c.receive(32, 3) == []
        # An orphan: the client never ends it; the broker asks the checker, which
        # says "unknown" at first and COMMIT once the test decides.
        orphan = p.send(message("txn-orphan", b"orphan"), p.begin_transaction())
        wait_for(lambda: orphan.message_id in checker.checked, timeout=30, what="orphan check")
        checker.decisions[orphan.message_id] = TransactionResolution.COMMIT
        with simple_consumer(broker, "g-txn", "txn-orphan") as c:
            got = drain(c, 1, timeout=30)
            assert [m.message_id for m in got] == [orphan.message_id]
            assert got[0].body == b"orphan"
    with broker.admin() as admin:
        stats = admin.stats()["transactions"]
        assert stats["COMMITTED"] >= 2 and stats["ROLLED_BACK"] >= 1


def test_retries_then_dead_letter_queue(broker: LocalBroker) -> None:
    with producer(broker, "doomed") as p:
        doomed = p.send(message("doomed", b"poison")).message_id
    with simple_consumer(broker, "g-dlq", "doomed") as c, broker.admin() as admin:
        attempts: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(attempts) < 2:
            for m in c.receive(1, 1):  # never acked: invisible for 1 s, then back
                attempts.append(m.delivery_attempt)
        assert attempts == [1, 2]
        # maxDeliveryAttempts 2: when the second expires the message goes to the DLQ
        # (the revive service moves it), and the group never gets a third attempt.
        copies = wait_for(
            lambda: [m for m in admin.message(doomed) if m["topic"] == "%DLQ%g-dlq"],
            what="DLQ copy",
        )
        assert copies[0]["bodyText"] == "poison"
        assert "rocketmq_send_to_dlq_messages_total" in admin.metrics()
        assert c.receive(1, 2) == []


def test_tag_and_sql_filters(broker: LocalBroker) -> None:
    with producer(broker, "filtered") as p:
        for i in range(20):
            p.send(
                message(
                    "filtered",
                    f"f{i}".encode(),
                    tag="red" if i % 2 else "blue",
                    properties={"n": str(i), "region": "eu" if i % 3 else "us"},
                )
            )
    with simple_consumer(broker, "g-tag", "filtered", FilterExpression("red")) as c:
        got = drain(c, 10)
        assert sorted(int(m.body[1:]) for m in got) == list(range(1, 20, 2))
        assert c.receive(32, 3) == []
    sql = FilterExpression("region = 'us' AND n >= 6", FilterType.SQL)
    with simple_consumer(broker, "g-sql", "filtered", sql) as c:
        got = drain(c, 5)
        assert sorted(int(m.body[1:]) for m in got) == [6, 9, 12, 15, 18]


def test_bad_messages_are_refused(broker: LocalBroker) -> None:
    """The official client checks size, emptiness and type itself, from what the broker
    told it (Telemetry settings, routes); raw requests that skip those checks get the
    protocol's status codes (test_raw_grpc.py)."""
    with producer(broker, "plain", "ordered") as p:
        with pytest.raises(IllegalArgumentException, match="65536"):  # the broker's limit
            p.send(message("plain", b"x" * 70_000))
        with pytest.raises(IllegalArgumentException):
            p.send(message("plain", b""))
        with pytest.raises(IllegalArgumentException, match=r"(?i)type"):
            p.send(message("ordered", b"not fifo"))  # FIFO topic, no message group
        # The broker answers TOPIC_NOT_FOUND to the route query; the client wraps it.
        with pytest.raises(Exception, match="no-such-topic"):
            p.send(message("no-such-topic", b"lost?"))
    consumer = SimpleConsumer(
        ClientConfiguration(broker.endpoints, Credentials()),
        "no-such-group",
        {"plain": FilterExpression()},
    )
    consumer.startup()
    try:
        with pytest.raises(NotFoundException):
            consumer.receive(1, 10)
    finally:
        consumer.shutdown()


def test_mixed_topic_accepts_every_type(broker: LocalBroker) -> None:
    with producer(broker, "mixed") as p:
        p.send(message("mixed", b"normal"))
        p.send(message("mixed", b"fifo", message_group="g"))
        p.send(message("mixed", b"delay", delivery_timestamp=int(time.time() * 1000) + 100))
