"""Run in its own process by the TLS tests: the unmodified official client with
``tls_enable=True``. It trusts the cluster's CA through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH,
which gRPC reads once per process (hence a process of its own).

``roundtrip`` sends COUNT messages and receives them back; ``refused`` sends one and
expects the broker to refuse it. Either way one JSON line on stdout says what happened:
``{"sent": [...], "received": {...}}`` or ``{"refused": <exception class>, "code": N,
"message": ..., "logged": [...]}``.
Credentials (``--access-key``/``--secret-key``) are signed as the client always does."""

from __future__ import annotations

import argparse
import json
import logging
import time

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def roundtrip(config: ClientConfiguration, topic: str, group: str, count: int) -> None:
    producer = Producer(config, (topic,), tls_enable=True)
    producer.startup()
    sent = []
    try:
        for i in range(count):
            msg = Message()
            msg.topic = topic
            msg.body = f"tls-{i}".encode()
            sent.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, 10, tls_enable=True)
    consumer.startup()
    got: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.receive(32, 10):
                got[msg.message_id] = msg.body.decode()
                consumer.ack(msg)
    finally:
        consumer.shutdown()
    print(json.dumps({"sent": sent, "received": got}), flush=True)


class _Kept(logging.Handler):
    """The client's own log lines: 5.1.2 logs a refused route's code and reason, then
    raises a generic "failed to fetch topic route"."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage()[:500])


def refused(config: ClientConfiguration, topic: str) -> None:
    """One send that must not succeed; what the client raised and logged."""
    kept = _Kept()
    logging.getLogger("rocketmq-python-client").addHandler(kept)
    producer = Producer(config, (topic,), tls_enable=True)
    outcome: dict[str, object]
    try:
        producer.startup()
        msg = Message()
        msg.topic = topic
        msg.body = b"not-allowed"
        producer.send(msg)
        outcome = {"refused": None}
    except Exception as exc:
        outcome = {
            "refused": type(exc).__name__,
            "code": getattr(exc, "code", None),
            "message": str(exc)[:500],
        }
    finally:
        producer.shutdown()
    outcome["logged"] = kept.lines
    print(json.dumps(outcome), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["roundtrip", "refused"])
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("count", type=int, nargs="?", default=1)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    args = parser.parse_args()
    client_log = logging.getLogger("rocketmq-python-client")
    client_log.setLevel(logging.WARNING)
    client_log.propagate = False
    credentials = Credentials(args.access_key, args.secret_key)
    config = ClientConfiguration(args.endpoint, credentials, request_timeout=10)
    if args.mode == "roundtrip":
        roundtrip(config, args.topic, args.group, args.count)
    else:
        refused(config, args.topic)


if __name__ == "__main__":
    main()
