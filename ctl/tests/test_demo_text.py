"""The demos' story lines (pure: numbers in, text out)."""

from __future__ import annotations

import math

from rocketcluster.ctl import demo_text as text


def test_numbers_and_seconds_read_like_a_person_writes_them() -> None:
    assert text.number(1234567) == "1,234,567"
    assert text.seconds(0.256) == "0.26 s"
    assert text.seconds(6.24) == "6.2 s"
    assert text.seconds(math.inf) == "never"


def test_starting_and_ready_say_the_shape_and_where_clients_connect() -> None:
    assert text.starting_line("prod", "examples/cluster.yaml", 3, 2, 3) == (
        "starting prod from examples/cluster.yaml: 3 controllers, 2 broker groups x 3 replicas ..."
    )
    assert text.starting_line("demo", "s.yaml", 0, 1, 1) == (
        "starting demo from s.yaml: 1 broker group x 1 replica ..."
    )
    line = text.ready_line(10, 6.21, {"prod-broker-0": "127.0.0.9:8081", "prod-broker-1": "x:8091"})
    assert line == (
        "ready in 6.2 s: 10 processes; clients connect to prod-broker-0 at 127.0.0.9:8081, "
        "prod-broker-1 at x:8091"
    )
    assert text.ready_line(1, 0.5, {}) == "ready in 0.50 s: 1 process"


def test_group_kill_and_election_lines() -> None:
    assert text.group_line("prod-broker-0", "prod-broker-0-0", 1, 3, 3) == (
        "prod-broker-0: master prod-broker-0-0 (epoch 1), SyncStateSet 3/3"
    )
    assert text.killed_line("prod-broker-0-0", "prod-broker-0").startswith(
        "SIGKILL prod-broker-0-0, the master of prod-broker-0"
    )
    assert text.elected_line("prod-broker-0-1", 2.14, 3, "master 1 lost its channel") == (
        "new master prod-broker-0-1 serving after 2.1 s (epoch 3; master 1 lost its channel)"
    )
    # no election event found: no empty parentheses
    assert text.elected_line("b", 0.5, None, "") == "new master b serving after 0.50 s"


def test_producing_line_counts_acknowledgements() -> None:
    assert text.produced_line(2, "orders", 1000, 3.0) == (
        "producing to topic orders with the official RocketMQ 5 Python client (2 producers): "
        "1,000 acknowledged in 3.0 s"
    )


def test_failed_sends_are_summarised_by_kind_never_dumped() -> None:
    assert "no failed send" in text.failed_sends_line(0, 0.0, {})
    line = text.failed_sends_line(12, 1.3, {"DEADLINE_EXCEEDED": 2, "UNAVAILABLE": 10})
    assert line == (
        "the producers saw 12 failed sends (UNAVAILABLE x10, DEADLINE_EXCEEDED x2): not "
        "acknowledged, so not owed; sends to the group succeeded again after 1.3 s"
    )
    never = text.failed_sends_line(1, None, {})
    assert never == (
        "the producers saw 1 failed send: not acknowledged, so not owed; and no send to "
        "the group succeeded afterwards"
    )


def test_audit_line_names_duplicates_only_when_there_are_some() -> None:
    assert text.audit_line(4210, 4210, 0, 0) == (
        "4,210 acknowledged, 4,210 read back with a consumer group, lost 0"
    )
    assert "1 message read at two offsets" in text.audit_line(10, 10, 0, 1)
    assert "2 messages read at two offsets" in text.audit_line(10, 10, 0, 2)


def test_client_library_line_counts_errors_and_warnings_and_points_at_the_log() -> None:
    assert text.client_library_line({}, {}, "/x.log") is None
    line = text.client_library_line(
        {"send UNAVAILABLE": 3, "telemetry stream UNAVAILABLE": 2},
        {"error": 3, "warning": 2},
        "/root/logs/rocketmq_python/rocketmq_client.log",
    )
    assert line == (
        "the client library logged 3 errors and 2 warnings: send UNAVAILABLE x3, "
        "telemetry stream UNAVAILABLE x2; whole lines in "
        "/root/logs/rocketmq_python/rocketmq_client.log"
    )
    assert text.client_library_line({"heartbeat other": 1}, {"warning": 1}, None) == (
        "the client library logged 1 warning: heartbeat other x1"
    )


def test_verdict_says_what_failed() -> None:
    assert text.verdict_line([], "nothing lost") == "verdict: nothing lost"
    assert text.verdict_line(["3 lost", "no send succeeded"], "nothing lost") == (
        "verdict: FAILED - 3 lost; no send succeeded"
    )


def test_stopped_line_says_what_stays_on_disk() -> None:
    assert text.stopped_line(9, ".demo/cluster", data_removed=True) == (
        "stopped 9 processes; logs stay in .demo/cluster"
    )
    assert text.stopped_line(1, "d", data_removed=False) == (
        "stopped 1 process; logs and data stay in d"
    )


def test_standalone_and_store_lines() -> None:
    assert text.standalone_consumed_line(40, "billing", 0.5, 0) == (
        "consumed and acknowledged 40 with its SimpleConsumer (group billing) in 0.50 s; missing 0"
    )
    assert text.standalone_lookup_line("01AB", "order #0", ["order-0"]) == (
        "looked up 01AB by id: body 'order #0', keys ['order-0']"
    )
    assert text.store_killed_line(3016, 9391) == "killed: 3,016 records acknowledged (9,391/s)"
    assert text.store_recovered_line(0.11, 1060714, "end of data", 1284) == (
        "reopened: recovery took 0.11 s, log end at byte 1,060,714 (end of data), "
        "1,284 records re-dispatched to the queues"
    )
    assert text.store_audit_line(3016, 3020, 3020, 0) == (
        "3,016 acknowledged, 3,020 in the log, 3,020 read through the consume queues, lost 0"
    )


def test_the_security_line_says_tls_auth_and_the_user() -> None:
    assert text.security_line(None, None) is None  # security off: no line
    assert text.security_line("d/tls/ca.crt", "orders-app") == (
        "TLS on every port (CA d/tls/ca.crt) and auth on: producing and auditing as user "
        "orders-app; admin calls over https with the admin token"
    )
    assert text.security_line("d/tls/ca.crt", None) == (
        "TLS on every port (CA d/tls/ca.crt): admin calls over https"
    )
    assert text.security_line(None, "ops", admin=True) == (
        "auth on: producing and auditing as user ops (an admin); admin calls with the admin token"
    )
