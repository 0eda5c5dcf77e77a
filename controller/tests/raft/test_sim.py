"""The deterministic simulator: many short seeded runs, and proof that it can fail."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from rocketcluster.controller.raft import sim
from rocketcluster.controller.raft.log import RaftLog
from rocketcluster.controller.raft.sim import SimOptions, Simulation, SimulationFailure, run_seeds

# 800 seeds in chunks (each a test case, so a failure names its chunk), about 50 s of
# one core. `make test` runs more from seed 800 on beside the tests marked `alone`
# (scripts/alone-beside-sim.sh: a steady load while they compare rates), and `make sim`
# runs 10,000.
TOTAL_SEEDS = 800
CHUNK = 100
OPTIONS = SimOptions(steps=600, liveness_ticks=400)


@pytest.mark.slow
@pytest.mark.parametrize("start", range(0, TOTAL_SEEDS, CHUNK))
def test_simulated_cluster_is_safe_and_live(start: int) -> None:
    stats = run_seeds(start, CHUNK, OPTIONS)
    assert len(stats) == CHUNK
    # the faults really happened and the cluster still made progress
    assert sum(s.crashes for s in stats) > 0
    assert sum(s.snapshots_installed for s in stats) > 0
    assert all(s.committed > 0 for s in stats)


def test_a_seed_replays_exactly() -> None:
    assert Simulation(42, OPTIONS).run() == Simulation(42, OPTIONS).run()


def test_a_broken_core_is_caught_with_a_replay_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # Grant votes without the up-to-date check of Raft §5.4.1: leaders lose entries.
    monkeypatch.setattr(RaftLog, "is_up_to_date", lambda self, index, term: True)
    with pytest.raises(SimulationFailure) as info:
        run_seeds(0, 50, OPTIONS)
    failure = info.value
    assert "python -m rocketcluster.controller.raft.sim --seeds 1 --start " in str(failure)
    assert f"--start {failure.seed} --steps {OPTIONS.steps}" in failure.replay
    assert "\n" not in failure.replay


def test_cli_runs_seeds_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--seeds", "3", "--start", "10", "--steps", "100"]) == 0
    assert capsys.readouterr().out.startswith("ok: 3 seeds from 10")


def test_cli_prints_the_replay_command_on_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(RaftLog, "is_up_to_date", lambda self, index, term: True)
    assert sim.main(["--seeds", "50", "--steps", "300"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("FAIL seed ")
    assert "replay: python -m rocketcluster.controller.raft.sim --seeds 1 --start " in err


def test_a_run_until_stopped_reports_the_seeds_it_finished() -> None:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-u", "-m", "rocketcluster.controller.raft.sim"),
            *("--start", "7", "--steps", "100", "--until-stopped", "--verbose"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # one seed done: the handler is in place
        assert first.startswith("SimStats(seed=7"), first + proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    summary = out.splitlines()[-1]
    assert summary.startswith("ok: ") and " seeds from 7 in " in summary, summary
    assert int(summary.split()[1]) >= 1, summary
