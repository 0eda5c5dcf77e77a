"""``rocketctl canary --dir`` against a real local cluster (one controller, two broker
groups of one broker): every group's probes succeed; a group whose broker is stopped
(SIGSTOP) fails while the other stays ok; resumed, it recovers. Also the config
re-read, and the errors a person meets first."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from rocketcluster.api.canary_config import CanaryConfig, CanaryGroup
from rocketcluster.api.client.controller_admin import ControllerAdmin
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.canary.cli import CANARY_DIR, CONFIG_FILE, running_canary
from rocketcluster.ctl.canary.probe import CanaryMetrics, GroupProbe, ProbeTarget
from rocketcluster.ctl.cli import main as rocketctl
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, wait_for

pytestmark = pytest.mark.slow

SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+|NaN)$")


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "apiVersion": "rocketcluster.io/v1alpha1",
            "kind": "RocketCluster",
            "metadata": {"name": "canaried"},
            "spec": {"controller": {"replicas": 1}, "brokers": {"groups": 2, "replicas": 1}},
        }
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found:
            labels = frozenset(
                tuple(part.split("=", 1)) for part in re.findall(r'\w+="[^"]*"', found.group(2))
            )
            clean = frozenset((k, v.strip('"')) for k, v in labels)
            out[(found.group(1), clean)] = float(found.group(3))
    return out


def _probes(port: int, group: str, result: str) -> float:
    key = frozenset({("cluster", "canaried"), ("group", group), ("result", result)})
    return _samples(port).get(("rocketmq_canary_probes_total", key), 0.0)


def _counted(port: int, group: str) -> float:
    return sum(_probes(port, group, r) for r in ("ok", "send_error", "receive_timeout"))


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRuntime, Path]]:
    directory = tmp_path_factory.mktemp("canary")
    runtime = LocalRuntime(directory)
    runtime.up(_cluster(), overrides=FAST_TUNING)
    try:
        yield runtime, directory
    finally:
        runtime.down()


def test_a_stopped_group_fails_alone_and_recovers(local: tuple[LocalRuntime, Path]) -> None:
    runtime, directory = local
    state = runtime.cluster_state()
    assert state is not None
    groups = state.groups()
    assert len(groups) == 2
    port = _free_port()
    with running_canary(directory, port, interval=0.5, timeout=3.0):

        def settled(group: str) -> bool:
            labels = frozenset({("cluster", "canaried"), ("group", group)})
            samples = _samples(port)
            return (
                samples.get(("rocketmq_canary_e2e_latency_seconds_count", labels), 0) >= 12
                and samples.get(("rocketmq_canary_success_ratio", labels)) == 1.0
            )

        # At least 12 probes of each group came back, and the last 12 all did.
        wait_for(lambda: all(settled(g) for g in groups), 60, what="12 ok probes in a row")
        samples = _samples(port)
        for group in groups:
            labels = frozenset({("cluster", "canaried"), ("group", group)})
            assert samples[("rocketmq_canary_last_success_timestamp_seconds", labels)] > 0
        stopped, other = groups
        broker = state.brokers(stopped)[0].name
        runtime.pause(broker)  # SIGSTOP: the group's only broker (its master)
        try:
            failed_before = _probes(port, stopped, "send_error") + _probes(
                port, stopped, "receive_timeout"
            )
            wait_for(
                lambda: (
                    _probes(port, stopped, "send_error") + _probes(port, stopped, "receive_timeout")
                    >= failed_before + 2
                ),
                60,
                what=f"{stopped}'s probes to fail",
            )
            ok_stopped = _probes(port, stopped, "ok")
            ok_other = _probes(port, other, "ok")
            wait_for(
                lambda: _probes(port, other, "ok") >= ok_other + 3, 60, what=f"{other} still ok"
            )
            assert _probes(port, stopped, "ok") == ok_stopped, "ok probes of a stopped group"
            assert (
                _samples(port)[
                    (
                        "rocketmq_canary_success_ratio",
                        frozenset({("cluster", "canaried"), ("group", stopped)}),
                    )
                ]
                < 1.0
            )
        finally:
            runtime.resume(broker)
        wait_for(
            lambda: _probes(port, stopped, "ok") >= ok_stopped + 2,
            90,
            what=f"{stopped} to recover",
        )
    log = (directory / CANARY_DIR / "process.log").read_text()
    assert re.search(rf"{re.escape(stopped)}\s+(send_error|receive_timeout) after", log), log[
        -2000:
    ]
    assert re.search(rf"{re.escape(other)}\s+ok\s+[0-9.]+ ms", log)


def test_a_drained_group_is_skipped_not_counted(local: tuple[LocalRuntime, Path]) -> None:
    """A group write-disabled for a scale-in's drain refuses the canary's sends: the
    probes are skipped (printed), not counted, so the alert has nothing to fire on."""
    runtime, directory = local
    state = runtime.cluster_state()
    assert state is not None
    drained, other = state.groups()
    port = _free_port()
    admin = ControllerAdmin(state.controller_admin_addresses())
    with running_canary(directory, port, interval=0.5, timeout=3.0):
        wait_for(lambda: _probes(port, drained, "ok") >= 2, 60, what="the group probed")
        admin.set_writable(drained, False)
        try:
            log = directory / CANARY_DIR / "process.log"
            wait_for(lambda: "the group is drained" in log.read_text(), 30, what="a skipped probe")
            counted = sum(
                _probes(port, drained, r) for r in ("ok", "send_error", "receive_timeout")
            )
            before = _probes(port, other, "ok")
            wait_for(lambda: _probes(port, other, "ok") >= before + 4, 30, what="other probes")
            assert (
                sum(_probes(port, drained, r) for r in ("ok", "send_error", "receive_timeout"))
                == counted
            )
        finally:
            admin.set_writable(drained, True)
            admin.close()
        before = _probes(port, drained, "ok")
        wait_for(lambda: _probes(port, drained, "ok") >= before + 2, 30, what="probed again")


def test_the_config_is_re_read_when_it_changes(local: tuple[LocalRuntime, Path]) -> None:
    """One group dropped from the file: its probes stop and its series go; back in
    the file, it is probed again."""
    runtime, directory = local
    state = runtime.cluster_state()
    assert state is not None
    first, second = state.groups()
    port = _free_port()
    with running_canary(directory, port, interval=0.5, timeout=3.0):
        wait_for(lambda: _probes(port, second, "ok") >= 1, 60, what="the second group probed")
        path = directory / CANARY_DIR / CONFIG_FILE
        config = CanaryConfig.model_validate_json(path.read_text())
        kept = [g for g in config.groups if g.name == first]
        path.write_text(config.model_copy(update={"groups": kept}).model_dump_json(by_alias=True))

        def gone() -> bool:
            return not any(("group", second) in labels for (_, labels) in _samples(port))

        wait_for(gone, 30, what="the dropped group's series to go")
        before = _probes(port, first, "ok")
        wait_for(lambda: _probes(port, first, "ok") >= before + 2, 30, what="the kept group")
        path.write_text("{not json")  # refused; the last good config goes on
        time.sleep(2)
        before = _probes(port, first, "ok")
        wait_for(lambda: _probes(port, first, "ok") >= before + 2, 30, what="probes go on")
        back = [*kept, CanaryGroup(name=second, endpoint=state.group_endpoints[second])]
        path.write_text(
            json.dumps(
                config.model_copy(update={"groups": back}).model_dump(mode="json", by_alias=True)
            )
        )
        wait_for(lambda: _probes(port, second, "ok") >= 1, 30, what="the group probed again")
    log = (directory / CANARY_DIR / "process.log").read_text()
    assert "config not applied" in log


def test_with_tls_and_auth_it_trusts_the_ca_and_signs_as_its_user(tmp_path: Path) -> None:
    """What the operator renders with security on — the CA alone (no client
    certificate) and the canary user's keys — against real brokers with TLS and auth."""
    spec = _cluster().model_dump(mode="json", by_alias=True)
    spec["metadata"]["name"] = "secured"
    spec["spec"]["brokers"]["groups"] = 1
    spec["spec"]["security"] = {"tls": {"enabled": True}, "auth": {"enabled": True}}
    spec["spec"]["users"] = [
        {
            "name": "rocketcluster-canary",
            "permissions": [
                {"topic": "rocketcluster-canary", "actions": ["pub", "sub"]},
                {"group": "rocketcluster-canary", "actions": ["sub"]},
            ],
        }
    ]
    runtime = LocalRuntime(tmp_path)
    runtime.up(RocketCluster.model_validate(spec), overrides=FAST_TUNING)
    try:
        port = _free_port()
        with running_canary(tmp_path, port, interval=0.5, timeout=3.0):
            config = CanaryConfig.model_validate_json(
                (tmp_path / CANARY_DIR / CONFIG_FILE).read_text()
            )
            assert config.ca_file is not None and config.credentials is not None
            assert config.credentials.access_key == "rocketcluster-canary"
            samples = {"cluster": "secured", "group": "secured-broker-0"}

            def ok() -> float:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                found = re.search(
                    r'^rocketmq_canary_probes_total\{cluster="secured",group="secured-broker-0",'
                    r'result="ok"\} ([0-9.]+)$',
                    text,
                    re.MULTILINE,
                )
                return float(found.group(1)) if found else 0.0

            wait_for(lambda: ok() >= 2, 60, what=f"ok probes of {samples}")
    finally:
        runtime.down()


def test_unreachable_groups_and_bad_configs_say_what_is_wrong(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cluster": "c", "groups": [{"name": "g", "endpoint": "nohost"}]}))
    listen = f"127.0.0.1:{_free_port()}"
    result = runner.invoke(rocketctl, ["canary", "--config", str(bad), "--listen", listen])
    assert result.exit_code != 0
    assert "groups.0.endpoint" in result.output and str(bad) in result.output
    result = runner.invoke(rocketctl, ["canary", "--dir", str(tmp_path / "none")])
    assert result.exit_code != 0 and "no local cluster runs in" in result.output
    result = runner.invoke(rocketctl, ["canary"])
    assert result.exit_code != 0 and "exactly one of --config FILE or --dir DIR" in result.output


async def test_an_unreachable_group_is_a_send_error_that_names_the_cause() -> None:
    metrics = CanaryMetrics()
    target = ProbeTarget(
        cluster="c",
        group="g",
        endpoint=f"127.0.0.1:{_free_port()}",  # nothing listens there
        topic="rocketcluster-canary",
        consumer_group="rocketcluster-canary",
        interval_s=1.0,
        timeout_s=2.0,
    )
    lines: list[str] = []
    probe = GroupProbe(target, metrics, sender="test", echo=lines.append)
    metrics.add_group("c", "g")
    try:
        outcome = await probe.probe()
    finally:
        await probe.close()
    probe.record(outcome)
    assert outcome.result == "send_error"
    assert "UNAVAILABLE" in outcome.detail or "no answer" in outcome.detail, outcome.detail
    assert re.search(r"g\s+send_error after [0-9.]+ s: ", lines[0]), lines
    value = metrics.registry.get_sample_value
    labels = {"cluster": "c", "group": "g"}
    assert value("rocketmq_canary_probes_total", {**labels, "result": "send_error"}) == 1
    assert value("rocketmq_canary_probes_total", {**labels, "result": "ok"}) == 0
    assert value("rocketmq_canary_success_ratio", labels) == 0.0
