"""A broker's front processes SIGKILLed under load (issue #28): two official producers
and an official POP consumer keep going; nothing acknowledged is lost, and no message
whose acknowledgement was answered OK is delivered again.

Each front is killed in turn, so whichever front the kernel gave each client's
connection to dies once under it: its calls in progress fail, the client reconnects
(to the other front, or the one started again), and the store process, which holds
everything, goes on."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from rocketmq.v5.consumer import SimpleConsumer

from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client, wait_for
from rocketcluster.e2e.kube import procfs

from .conftest import message, producer, proto_cluster, simple_consumer

pytestmark = pytest.mark.slow

TOPIC = "survivor"
GROUP = "g-survivor"
PER_PRODUCER = 400
DRAIN_TIMEOUT_S = 120.0


@dataclass
class Ledger:
    """What the clients were told: sends answered OK, deliveries, acks answered OK."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: set[str] = field(default_factory=set)  # bodies
    send_errors: int = 0
    # A send retried after a lost answer may store the body twice, under two message
    # ids: deliveries and acks are judged by message id, what was lost by body.
    received: list[tuple[str, str, float]] = field(default_factory=list)  # id, body, when
    acked: dict[str, float] = field(default_factory=dict)  # message id -> when acked OK
    consumer_errors: int = 0


def produce(broker: LocalBroker, name: str, ledger: Ledger, stop: threading.Event) -> None:
    with producer(broker, TOPIC) as p:
        for i in range(PER_PRODUCER):
            body = f"{name}-{i}"
            while not stop.is_set():
                try:
                    p.send(message(TOPIC, body.encode(), keys=body))
                except Exception:  # a front died under the call: send it again
                    with ledger.lock:
                        ledger.send_errors += 1
                    time.sleep(0.05)
                    continue
                with ledger.lock:
                    ledger.sent.add(body)
                break
            time.sleep(0.002)


def consume_once(consumer: SimpleConsumer, ledger: Ledger) -> None:
    try:
        batch = consumer.receive(16, 15)
    except Exception:
        with ledger.lock:
            ledger.consumer_errors += 1
        time.sleep(0.05)
        return
    for msg in batch:
        body, message_id = msg.body.decode(), msg.message_id
        with ledger.lock:
            ledger.received.append((message_id, body, time.monotonic()))
        try:
            consumer.ack(msg)
        except Exception:  # not acknowledged: it may come again, and must
            with ledger.lock:
                ledger.consumer_errors += 1
            continue
        with ledger.lock:
            ledger.acked.setdefault(message_id, time.monotonic())


def _acked_more_than(ledger: Ledger, count: int) -> bool:
    return len(ledger.acked) > count


def _replaced(broker: LocalBroker, victim: int) -> bool:
    fronts = broker.runtime.front_pids(broker.name)
    return victim not in fronts and len(fronts) == 2


def front_restarts(broker: LocalBroker) -> float:
    text = httpx.get(f"http://{broker.admin_address}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("rocketcluster_front_restarts_total"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("the broker exports no rocketcluster_front_restarts_total")


def test_fronts_killed_under_producers_and_a_pop_consumer(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    quiet_official_client()
    cluster = proto_cluster("fronts", front_processes=2)
    with local_broker(cluster, tmp_path_factory.mktemp("fronts")) as broker:
        ledger = Ledger()
        stop = threading.Event()
        producers = [
            threading.Thread(target=produce, args=(broker, f"p{n}", ledger, stop), daemon=True)
            for n in range(2)
        ]
        with simple_consumer(broker, GROUP, TOPIC, await_duration=2) as consumer:
            consuming = threading.Event()

            def consume() -> None:
                while not consuming.is_set():
                    consume_once(consumer, ledger)

            reader = threading.Thread(target=consume, daemon=True)
            for thread in [*producers, reader]:
                thread.start()
            try:
                originals = broker.runtime.front_pids(broker.name)
                assert len(originals) == 2, f"fronts: {originals}"
                for victim in originals:
                    wait_for(lambda: len(ledger.acked) >= 50, timeout=60, what="acks flowing")
                    before = len(ledger.acked)
                    os.kill(victim, signal.SIGKILL)
                    wait_for(
                        functools.partial(_replaced, broker, victim),
                        timeout=30,
                        what="the killed front started again",
                    )
                    wait_for(
                        functools.partial(_acked_more_than, ledger, before + 20),
                        timeout=60,
                        what="acks after the kill",
                    )
                for thread in producers:
                    thread.join(timeout=180)
                    assert not thread.is_alive(), "a producer did not finish"
                # Delivered at least once: an ack whose answer a killed front lost may
                # have reached the store (never delivered again) or not (delivered again).
                wait_for(
                    lambda: ledger.sent <= {body for _, body, _ in ledger.received},
                    timeout=DRAIN_TIMEOUT_S,
                    what="every acknowledged send delivered",
                )
            finally:
                stop.set()
                consuming.set()
                reader.join(timeout=30)
        assert front_restarts(broker) >= 2
    assert len(ledger.sent) == 2 * PER_PRODUCER
    again = [
        (mid, body)
        for mid, body, at in ledger.received
        if mid in ledger.acked and at > ledger.acked[mid]
    ]
    assert not again, f"delivered again after an acknowledged ack: {again[:10]}"
    print(
        f"\nfronts killed twice: {len(ledger.sent)} sent ({ledger.send_errors} send errors "
        f"retried), {len(ledger.acked)} acknowledged OK, {ledger.consumer_errors} consumer "
        f"errors, {len(ledger.received)} deliveries"
    )


def _listeners(host: str, port: int) -> list[str]:
    """The processes with a socket listening on ``host:port`` or on the wildcard
    address at ``port`` (IPv4 and IPv6, which also takes IPv4), from /proc."""
    wanted = {
        f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}",
        f"00000000:{port:04X}",
        f"{'0' * 32}:{port:04X}",
    }
    inodes = set()
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table_path) as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if fields[1] in wanted and fields[3] == "0A":  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
        except OSError:
            continue
        if links & inodes:
            found.append(f"{entry.name} {procfs.cmdline(int(entry.name))[:200]}")
    return found or [f"none found (sockets: {sorted(inodes)})"]


def test_fronts_stop_serving_at_once_when_the_store_process_dies(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """No front outlives its store process: with it SIGKILLed, every front exits (its
    clients see the port closed and go to the restarted pod) within a second or two."""
    cluster = proto_cluster("orphans", front_processes=2)
    with local_broker(cluster, tmp_path_factory.mktemp("orphans")) as broker:
        fronts = broker.runtime.front_pids(broker.name)
        assert len(fronts) == 2
        killed_at = time.monotonic()
        broker.kill()
        # every thread ended: a front whose first thread shows as a zombie may still
        # hold its listening socket in another (procfs.running)
        wait_for(
            lambda: not any(procfs.running(pid) for pid in fronts),
            timeout=10,
            what="every front gone after its store process",
        )
        gone_after = time.monotonic() - killed_at
        host, port = broker.endpoints.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except OSError:
            pass
        else:  # say who answered
            pytest.fail(f"{host}:{port} still answers; listening: {_listeners(host, int(port))}")
    print(f"\nfronts gone {gone_after:.2f} s after the store process was killed")


def _broker_config(tmp_path: Path, cluster: str, **settings: object) -> Path:
    """A one-broker config file for ``python -m rocketcluster.broker.main``."""
    config = {
        "cluster": cluster,
        "group": f"{cluster}-0",
        "dataDir": str(tmp_path / "data"),
        "bindHost": "127.0.0.1",
        "clientPort": 0,
        "adminPort": 0,
        **settings,
    }
    path = tmp_path / "broker.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("fronts", [0, 2])
def test_a_client_port_in_use_fails_the_start_naming_it(fronts: int, tmp_path: Path) -> None:
    """Another program on the client port: the broker (its fronts, when it has them)
    cannot listen, and the start fails with the port in the message and exit status 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = _broker_config(tmp_path, "taken", clientPort=port, frontProcesses=fronts)
        done = subprocess.run(
            [sys.executable, "-m", "rocketcluster.broker.main", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stderr[-2000:]
    last = [line for line in done.stderr.splitlines() if "CRITICAL" in line][-1]
    assert f"127.0.0.1:{port}" in last or f"port {port}" in last, last


def test_a_broker_waiting_for_its_fronts_stops_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM while the store process waits for fronts that never serve: it stops at
    once (exit 0), and ends them, instead of waiting out the start's minute."""
    repo = Path(__file__).resolve().parents[3]
    path = _broker_config(tmp_path, "hung", frontProcesses=1)
    env = {**os.environ, "ROCKETCLUSTER_FRONT_MODULE": "broker.tests.front.hanging_front"}
    log = tmp_path / "broker.log"
    with log.open("w") as sink:
        broker = subprocess.Popen(
            [sys.executable, "-m", "rocketcluster.broker.main", "--config", str(path)],
            cwd=repo,
            env=env,
            stderr=sink,
        )
    try:
        # The store opened, then the broker waits for its front (started before).
        wait_for(lambda: " open: offsets " in log.read_text(), timeout=60, what="the store")
        fronts = procfs.descendants(broker.pid)
        assert fronts, "no front started"
        time.sleep(1.0)
        stopped_at = time.monotonic()
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=30)
        took = time.monotonic() - stopped_at
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    stderr = log.read_text()
    assert broker.returncode == 0, stderr[-2000:]
    assert "stopped while starting" in stderr
    assert took < 15, f"took {took:.1f} s to stop"
    wait_for(lambda: not any(procfs.running(p) for p in fronts), timeout=10, what="the front ended")


def test_a_stop_while_the_broker_imports_is_clean(tmp_path: Path) -> None:
    """SIGTERM right after the start, while the store process still imports (its
    fronts already launched): exit 0 and every front ended, not the default action's
    death by signal with the fronts left to notice."""
    repo = Path(__file__).resolve().parents[3]
    path = _broker_config(tmp_path, "early-stop", frontProcesses=1)
    env = {**os.environ, "ROCKETCLUSTER_FRONT_MODULE": "broker.tests.front.hanging_front"}
    broker = subprocess.Popen(
        [sys.executable, "-m", "rocketcluster.broker.main", "--config", str(path)],
        cwd=repo,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: procfs.descendants(broker.pid), timeout=60, what="the front started")
        fronts = procfs.descendants(broker.pid)
        broker.send_signal(signal.SIGTERM)
        _, stderr = broker.communicate(timeout=60)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    assert broker.returncode == 0, stderr[-2000:]
    assert "stopped before it started" in stderr or "stopped while starting" in stderr, stderr
    wait_for(lambda: not any(procfs.running(p) for p in fronts), timeout=10, what="the front ended")


def test_fronts_start_while_the_broker_waits_for_its_controllers(tmp_path: Path) -> None:
    """The fronts are started first and import while the store process recovers and
    takes its role, so a new master serves a bind after it is named (front/launch.py).
    Here no controller answers: the broker waits for its role, and its two fronts
    already run, waiting for their configuration (the client port is not served
    before the broker knows its role). A SIGTERM then ends them all."""
    with socket.socket() as nobody:  # a port nothing listens on: no controller
        nobody.bind(("127.0.0.1", 0))
        silent = f"127.0.0.1:{nobody.getsockname()[1]}"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        client_port = free.getsockname()[1]
    path = _broker_config(
        tmp_path,
        "early",
        clientPort=client_port,
        haPort=0,
        frontProcesses=2,
        controllers=[silent],
    )
    log = tmp_path / "broker.log"
    with log.open("w") as sink:
        broker = subprocess.Popen(
            [sys.executable, "-m", "rocketcluster.broker.main", "--config", str(path)],
            stderr=sink,
        )
    try:

        def fronts() -> list[int]:
            return [
                p
                for p in procfs.descendants(broker.pid)
                if "rocketcluster.broker.front" in procfs.cmdline(p)
            ]

        # The store opened: the broker now asks the controllers for its role.
        wait_for(lambda: " open: offsets " in log.read_text(), timeout=60, what="the store")
        assert len(fronts()) == 2, f"fronts before the role: {fronts()}"
        started = fronts()
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", client_port)) != 0, (
                "the client port is served before the broker has its role"
            )
        assert broker.poll() is None, log.read_text()[-2000:]
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=60)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    assert broker.returncode == 0, log.read_text()[-2000:]
    wait_for(
        lambda: not any(procfs.running(p) for p in started), timeout=15, what="the fronts ended"
    )
