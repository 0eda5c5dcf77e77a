"""The official RocketMQ 5 Python client, run as its own process by the console tests:
it trusts the cluster's CA only through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, which
gRPC reads once per process, so each use gets a fresh one.

``python official_client_process.py produce|consume|steady`` reads its JSON arguments
on stdin (a 4 MiB body does not fit a command line) and prints one JSON line.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import threading
import time
from typing import Any

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def _config(args: dict[str, Any]) -> ClientConfiguration:
    return ClientConfiguration(
        args["endpoints"], Credentials(args["accessKey"], args["secretKey"]), request_timeout=10
    )


def produce(args: dict[str, Any]) -> dict[str, Any]:
    producer = Producer(_config(args), (args["topic"],), tls_enable=True)
    producer.startup()
    ids = {}
    try:
        for m in args["messages"]:
            msg = Message()
            msg.topic = args["topic"]
            msg.body = base64.b64decode(m["body"])
            msg.keys = m["key"]
            msg.tag = m.get("tag", "created")
            msg.add_property("region", "eu")
            ids[m["key"]] = producer.send(msg).message_id
    finally:
        producer.shutdown()
    return {"ids": ids}


def consume(args: dict[str, Any]) -> dict[str, Any]:
    """Receive as ``group``; acknowledge all but the keys in ``hold``; stop after
    ``stopAfter`` acknowledged, or once ``wantKeys`` were all received, or at the
    deadline."""
    consumer = SimpleConsumer(
        _config(args),
        args["group"],
        {args["topic"]: FilterExpression()},
        await_duration=3,
        tls_enable=True,
    )
    consumer.startup()
    acked: list[str] = []
    seen: dict[str, int] = {}
    hold = set(args.get("hold", []))
    want = set(args.get("wantKeys", []))
    deadline = time.monotonic() + args.get("timeout", 60)
    try:
        while time.monotonic() < deadline:
            for msg in consumer.receive(16, args.get("invisible", 20)):
                key = next(iter(sorted(msg.keys or [])), "")
                seen[key] = seen.get(key, 0) + 1
                if key in hold:
                    continue
                consumer.ack(msg)
                acked.append(key)
                if args.get("stopAfter") and len(acked) >= args["stopAfter"]:
                    return {"acked": acked, "seen": seen}
            if want and want <= set(seen) and all(seen[k] >= args.get("minSeen", 1) for k in want):
                break
    finally:
        consumer.shutdown()
    return {"acked": acked, "seen": seen}


def steady(args: dict[str, Any]) -> dict[str, Any]:
    """Produce one message every ``interval`` seconds and consume them as ``group``
    (acknowledging everything it receives), until SIGTERM: a cluster in use."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts = {"sent": 0, "acked": 0}

    def produce_loop() -> None:
        producer = Producer(_config(args), (args["topic"],), tls_enable=True)
        producer.startup()
        try:
            while not stop.is_set():
                msg = Message()
                msg.topic = args["topic"]
                msg.body = json.dumps({"steady": counts["sent"]}).encode()
                msg.keys = f"steady-{counts['sent']}"
                try:
                    producer.send(msg)
                    counts["sent"] += 1
                except Exception:  # a broker the test took down: keep going
                    time.sleep(0.5)
                stop.wait(args.get("interval", 0.2))
        finally:
            producer.shutdown()

    def consume_loop() -> None:
        consumer = SimpleConsumer(
            _config(args),
            args["group"],
            {args["topic"]: FilterExpression()},
            await_duration=2,
            tls_enable=True,
        )
        consumer.startup()
        try:
            while not stop.is_set():
                try:
                    for msg in consumer.receive(16, 15):
                        consumer.ack(msg)
                        counts["acked"] += 1
                except Exception:
                    time.sleep(0.5)
        finally:
            consumer.shutdown()

    threads = [threading.Thread(target=produce_loop), threading.Thread(target=consume_loop)]
    for t in threads:
        t.start()
    print(json.dumps({"started": True}), flush=True)
    for t in threads:
        t.join()
    return counts


if __name__ == "__main__":
    command = sys.argv[1]
    commands = {"produce": produce, "consume": consume, "steady": steady}
    result = commands[command](json.loads(sys.stdin.readline()))
    print(json.dumps(result))
