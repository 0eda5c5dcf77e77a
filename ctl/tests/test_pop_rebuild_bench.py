"""The POP rebuild benchmark replays what each case says: the whole journal from its
start without checkpoints (in one piece or in slices), and only what follows the
latest checkpoint with them; every case rebuilds every queue's state."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rocketcluster.broker.messaging.pop import CHECKPOINT_EVERY_RECORDS
from rocketcluster.ctl.bench.pop_rebuild_bench import QUEUES
from rocketcluster.ctl.cli import main


def test_the_rebuild_cases_replay_what_they_say(tmp_path: Path) -> None:
    records = CHECKPOINT_EVERY_RECORDS + 1_500
    result = CliRunner().invoke(
        main,
        ["bench", "pop-rebuild", "--records", str(records), "--out", str(tmp_path), "--json"],
    )
    assert result.exit_code == 0, result.output
    [written] = list(tmp_path.glob("pop-rebuild-*.json"))
    assert written.stat().st_size > 0
    cases = {c["case"]: c for c in json.loads(result.output)["cases"]}
    assert set(cases) == {
        "one piece, no checkpoint",
        "slices, no checkpoint",
        "slices, checkpoints",
    }
    assert cases["one piece, no checkpoint"]["records_replayed"] == records
    assert cases["slices, no checkpoint"]["records_replayed"] == records
    from_checkpoint = cases["slices, checkpoints"]
    assert from_checkpoint["checkpoints"] == 1
    # From the checkpoint's write (the 10,001st, with that write's own ops) on.
    assert from_checkpoint["records_replayed"] == 1_500
    assert all(c["states"] == QUEUES for c in cases.values())
