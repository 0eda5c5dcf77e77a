"""A soak across sessions: its state survives a stop or a kill, what the audit must
find spans every session, crashes are found in the history, and the timeline draws
the sessions end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketcluster.ctl.chaos.history import History, iter_history_file
from rocketcluster.ctl.chaos.sessions import (
    RunState,
    acknowledged,
    crashes,
    retired_by_retention,
)
from rocketcluster.ctl.chaos.timeline import render, session_offsets


def test_state_round_trips_and_adds_up_fault_time(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = RunState("soak", seed=3, groups=2, target_faults=1000)
    state.episodes, state.faults = 10, 17
    state.save(path, 40.0)  # mid-session: the session's time so far
    assert RunState.load(path).fault_seconds == 40.0
    state.end_session(55.0)
    state.save(path, 0.0)
    again = RunState.load(path)
    assert (again.sessions, again.faults, again.fault_seconds) == (1, 17, 55.0)
    again.save(path, 5.0)  # the next session, 5 s in
    assert RunState.load(path).fault_seconds == 60.0
    assert not path.with_suffix(".tmp").exists()


def test_a_resume_asked_with_another_seed_or_length_is_refused() -> None:
    state = RunState("soak", seed=2, groups=2, target_faults=1000)
    assert state.resume_conflict(None, None) is None
    assert state.resume_conflict(2, 1000) is None
    assert state.resume_conflict(1, None) == (
        "--seed 1 asked, but it has --seed 2; leave --seed out to go on"
    )
    assert "--faults 2000 asked, but it has --faults 1000" in str(state.resume_conflict(None, 2000))


def test_an_unknown_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"scenarios": "soak", "seed": 1, "groups": 2, "color": "red"}))
    with pytest.raises(ValueError, match="color"):
        RunState.load(path)


def _two_sessions(path: Path) -> None:
    clock = iter(float(t) for t in range(100))
    first = History(path, clock=lambda: next(clock), session=0)
    first.append("ok", "send", id="s0-a", topic="t")
    first.append("fail", "send", id="s0-b", topic="t")
    first.close()
    again = iter(float(t) for t in range(100))
    second = History(path, clock=lambda: next(again), session=1, resume=True)
    second.append("ok", "send", id="s1-a", topic="t")
    second.append("ok", "send", id="s1-b", topic="u")
    second.append("info", "note", event="crashed", process="chaos-broker-0-1", why="episode")
    second.close()


def test_what_every_session_acknowledged_and_what_crashed(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    _two_sessions(path)
    assert acknowledged(iter_history_file(path)).ids == {"t": {"s0-a", "s1-a"}, "u": {"s1-b"}}
    assert crashes(iter_history_file(path)) == [
        {"session": 1, "time": 4.0, "process": "chaos-broker-0-1"}
    ]


def test_one_sessions_acknowledgements_for_a_cluster_that_lived_only_that_long() -> None:
    """The emulated soak's cluster ends with its session, so each session's audit wants
    that session's acknowledged ids only (the earlier ones were audited before)."""
    records: list[dict[str, object]] = [
        {"type": "ok", "f": "send", "id": "a", "topic": "t"},  # no session: session 0
        {"type": "ok", "f": "send", "id": "b", "topic": "t", "session": 1},
        {"type": "fail", "f": "send", "id": "c", "topic": "t", "session": 1},
    ]
    assert acknowledged(records).ids == {"t": {"a", "b"}}
    assert acknowledged(records, 0).ids == {"t": {"a"}}
    assert acknowledged(records, 1).ids == {"t": {"b"}}


def test_what_retention_deleted_after_every_group_had_it_is_not_wanted_by_the_audit() -> None:
    """Seed 1's audit waited 13 minutes for 93,367 ids: a full disk had made group 0
    delete its oldest consumed segments. Those ids are counted, not wanted; an id no
    consumer group received stays wanted whatever the floors."""

    def receive(message_id: str, bgroup: str, queue: int, offset: int) -> dict[str, object]:
        return {
            "type": "ok",
            "f": "receive",
            "id": message_id,
            "topic": "t",
            "bgroup": bgroup,
            "queue": queue,
            "offset": offset,
        }

    records: list[dict[str, object]] = [
        {"type": "ok", "f": "send", "id": i, "topic": "t"} for i in ("old", "kept", "unread", "g1")
    ]
    records += [
        receive("old", "g0", 0, 4),
        receive("old", "g0", 1, 900),  # a redelivery elsewhere cannot move where it is stored
        receive("kept", "g0", 0, 5),
        receive("g1", "g1", 0, 0),
        {
            "type": "ok",
            "f": "audit",
            "id": "unread",
            "topic": "t",
            "bgroup": "g0",
            "queue": 0,
            "offset": 1,
        },
    ]
    acked = acknowledged(records)
    assert acked.stored_at["old"] == (("t", "g0", 0), 4)
    want, retired = retired_by_retention(acked, {("t", "g0", 0): 5, ("t", "g1", 0): 0})
    assert want == {"t": {"kept", "unread", "g1"}}
    assert retired == {"t": 1}
    # No floor known (a master that did not answer): everything stays wanted.
    assert retired_by_retention(acked, {})[0] == {"t": {"old", "kept", "unread", "g1"}}


def test_sessions_are_drawn_one_after_the_other(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    _two_sessions(path)
    offsets = session_offsets(iter_history_file(path))
    assert offsets[0] == 0.0
    assert offsets[1] > 2.0  # after the first session's last record, and a gap
    out = tmp_path / "timeline.png"
    faults = [{"kind": "kill", "session": 1, "start": 1.0, "end": 2.0}]
    render(lambda: iter_history_file(path), faults, out, "two sessions")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
