"""Run in its own process by test_tls.py: the unmodified official client with
``tls_enable=True`` sends and receives. It trusts the cluster's CA through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, which gRPC reads once per process (hence a process
of its own). Prints one JSON line: what was sent and what came back."""

from __future__ import annotations

import json
import logging
import sys
import time

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def main(endpoint: str, topic: str, group: str, count: int) -> None:
    logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
