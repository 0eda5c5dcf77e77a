"""The typed ``cluster.json`` (local/state.py): a real one, as ``LocalRuntime.up``
writes it for a replicated cluster, reads back with every field the tools use; a file
that is not one fails with an error naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.client.controller_admin import ControllerAdminError
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.controllers import controller_admin
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, wait_for

CLUSTER = RocketCluster.model_validate(
    {
        "metadata": {"name": "typed"},
        "spec": {
            "controller": {"replicas": 1},
            "brokers": {"groups": 1, "replicas": 2, "replication": {"mode": "async"}},
        },
    }
)


def test_a_real_cluster_json_reads_typed(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "c")
    raw = runtime.up(CLUSTER, overrides=DISK_GUARDS_OFF)
    try:
        state = runtime.cluster_state()
        assert state is not None
        assert state == LocalClusterState.parse(raw)  # the file is what up returned
        assert (state.name, state.directory, state.tls) == ("typed", runtime.directory, None)
        [controller] = state.controllers()
        [proxy] = state.proxies()
        assert state.controller_admin_addresses() == [controller.admin]
        assert state.controller_endpoints == controller.raft
        assert state.groups() == ["typed-broker-0"] == sorted(state.group_endpoints)
        replicas = state.brokers("typed-broker-0")
        assert [b.name for b in replicas] == ["typed-broker-0-0", "typed-broker-0-1"]
        assert state.brokers("typed-broker-1") == []
        assert state.client_endpoints == state.group_endpoints["typed-broker-0"]
        assert proxy.addresses["typed-broker-0"] == state.client_endpoints
        for broker in replicas:
            assert state.group_of(broker) == "typed-broker-0"
            assert broker.config_path.exists() and broker.log_path.exists()
            assert state.process(broker.name) == broker
            assert state.listening_at(broker.admin) == broker
        # Each record reads back as the dict the file holds.
        assert [p.as_dict() for p in state.processes] == raw["processes"]
        # The group view's registered endpoints name these processes.
        with controller_admin(state) as admin:

            def with_master() -> dict[str, Any] | None:
                try:
                    view = admin.group("typed-broker-0")
                except ControllerAdminError:
                    return None
                return view if view.get("masterId") is not None else None

            view = wait_for(with_master, timeout=60, what="a master")
        master = split_registered(view["replicas"][str(view["masterId"])])[0]
        assert state.broker_serving(master, "typed-broker-0") in replicas
        with pytest.raises(LookupError, match="no process named 'nope'"):
            state.process("nope")
        with pytest.raises(LocalStateError, match="controller typed-controller-0 has no client"):
            _ = controller.client
    finally:
        runtime.down()
    assert runtime.cluster_state() is None


def _minimal() -> dict[str, Any]:
    return {
        "name": "x",
        "directory": "/tmp/x",
        "processes": [
            {
                "name": "x-broker-0",
                "role": "broker",
                "pid": 1,
                "host": "127.0.0.1",
                "addresses": {"client": "127.0.0.1:8081", "admin": "127.0.0.1:8080"},
                "configPath": "/tmp/x/config/x-broker-0.json",
                "logPath": "/tmp/x/logs/x-broker-0.log",
            }
        ],
    }


def test_a_file_written_before_groups_were_recorded_still_knows_them() -> None:
    standalone = LocalClusterState.parse(_minimal())
    assert standalone.groups() == ["x-broker-0"]  # a standalone broker is its group
    replicated = _minimal()
    replicated["processes"][0]["name"] = "x-broker-0-1"
    replicated["processes"].append({**replicated["processes"][0], "name": "x-controller-0"})
    replicated["processes"][1]["role"] = "controller"
    state = LocalClusterState.parse(replicated)
    assert [b.name for b in state.brokers("x-broker-0")] == ["x-broker-0-1"]


def test_a_malformed_cluster_json_names_the_file_and_the_fields(tmp_path: Path) -> None:
    broken = _minimal()
    del broken["processes"][0]["pid"]
    broken["processes"][0]["role"] = "sidecar"
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(LocalStateError) as error:
        LocalClusterState.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ")
    assert "processes.0.role: Input should be 'controller', 'broker' or 'proxy'" in message
    assert "processes.0.pid: Field required" in message

    path.write_text("{not json")
    with pytest.raises(LocalStateError, match=r"cluster\.json: not JSON"):
        LocalRuntime(tmp_path).cluster_state()
    with pytest.raises(LocalStateError, match="not a JSON object but list"):
        LocalClusterState.parse([])
    with pytest.raises(LocalStateError, match="cannot read it"):
        LocalClusterState.load(tmp_path / "missing.json")
