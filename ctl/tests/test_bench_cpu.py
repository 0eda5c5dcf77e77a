"""``rocketctl bench cpu --quick --json`` on a standalone broker and a 3-replica sync
group, for real (processes, gRPC, disks, both clients): the JSON has every case and
every process role, each role burnt CPU, and what the clients were acknowledged is
what the master stored in the window. Behaviour, not speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The fixture runs the whole quick bench (two clusters up and down): about a minute on
# a quiet machine, several on one loaded by other work; the subprocess timeout is
# inside this one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROLES = {
    "standalone": {"master", "client"},
    "sync3": {"master", "slave-1", "slave-2", "controller-1", "controller-2", "controller-3"}
    | {"proxy", "client"},
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("bench-cpu")
    rocketctl = Path(sys.executable).parent / "rocketctl"
    argv = [str(rocketctl), "bench", "cpu", "--quick", "--json", "--cases", "standalone,sync3"]
    argv += ["--out", str(tmp / "results"), "--work-dir", str(tmp / "work")]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_the_json_file_is_what_stdout_says(result: dict[str, Any]) -> None:
    path = Path(result.pop("file"))
    assert path.name.startswith("cpu-") and path.suffix == ".json"
    assert json.loads(path.read_text()) == result
    assert len(result["machine"]["load_average"]) == 3
    assert result["options"]["seconds"] == 2.0 and result["options"]["kills"] == 0
    assert set(result["idle_cores"]) == {"standalone", "three_sync"}
    assert "failover" not in result and "nats_r3" not in result and result["profiles"] == {}


def test_every_case_has_every_role_on_the_path_burning_cpu(result: dict[str, Any]) -> None:
    expected = {f"{c}_{k}" for c in ROLES for k in ("lean_produce", "official_produce")}
    assert set(result["cases"]) == expected
    for name, case in result["cases"].items():
        roles = ROLES[name.split("_")[0]]
        assert set(case["cpu_us_per_msg"]) == roles, name
        for role, us in case["cpu_us_per_msg"].items():
            # The lean producer goes straight to the master: the proxy carries none of
            # its load and, following the controllers with a long poll, may burn none.
            bypassed = role == "proxy" and name.endswith("_lean_produce")
            assert isinstance(us, float) and (us >= 0 if bypassed else us > 0), (name, role, us)
        net = case["cpu_us_per_msg_net_of_idle"]
        assert set(net) == roles and all(
            0 <= net[r] <= us for r, us in case["cpu_us_per_msg"].items()
        )
        total = sum(case["cpu_s"].values()) * 1e6 / case["messages"]
        assert case["cpu_us_per_msg_total"] == pytest.approx(total), name
        assert case["p99_ms"] >= case["p50_ms"] > 0 and case["msgs_per_s"] > 0, name


def test_the_messages_acknowledged_are_the_messages_stored(result: dict[str, Any]) -> None:
    for name, case in result["cases"].items():
        assert case["errors"] == 0, name
        assert case["messages"] > 0, name
        assert case["stored_in_window"]["master"] == case["messages"], name


def test_elections_are_read_from_the_controllers(result: dict[str, Any]) -> None:
    for name, case in result["cases"].items():
        seen = case["elections_during_load"]
        assert seen["controllers"] is name.startswith("sync3"), name
        assert isinstance(seen["elections"], int) and isinstance(seen["events"], list), name
    assert result["elections_during_load"] == sum(
        c["elections_during_load"]["elections"] for c in result["cases"].values()
    )
    ratio = result["ratios"]["sync3_over_single_produce"]
    assert ratio == pytest.approx(
        result["cases"]["sync3_lean_produce"]["msgs_per_s"]
        / result["cases"]["standalone_lean_produce"]["msgs_per_s"]
    )


def test_elections_count_new_master_epochs_and_sync_state_set_changes() -> None:
    from rocketcluster.ctl.bench.cpu.roles import elections

    def event(index: int, master_epoch: int, sss_epoch: int) -> dict[str, Any]:
        return {"index": index, "command": "X", "masterEpoch": master_epoch} | {
            "syncStateSetEpoch": sss_epoch,
            "masterId": 1,
            "time": 0,
            "reason": "",
        }

    before = [event(1, 1, 1), event(2, 1, 2)]
    quiet = elections(before, [*before, event(3, 1, 2)])
    assert (quiet["elections"], quiet["sync_state_set_changes"]) == (0, 0)
    assert [e["index"] for e in quiet["events"]] == [3]
    after = [*before, event(3, 1, 3), event(4, 2, 4), event(5, 2, 4), event(6, 3, 5)]
    seen = elections(before, after)
    assert (seen["elections"], seen["sync_state_set_changes"]) == (2, 3)
    assert elections(None, after)["controllers"] is False
