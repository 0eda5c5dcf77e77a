"""The checker must be able to fail: feed it broken histories."""

from __future__ import annotations

import pytest

from rocketcluster.controller.raft import Entry, HardState
from rocketcluster.controller.raft.checker import SafetyChecker, SafetyViolation, invariant


class FakeLog:
    def __init__(self, terms: dict[int, int], first: int = 1) -> None:
        self.terms = terms
        self.first = first

    def first_index(self) -> int:
        return self.first

    def last_index(self) -> int:
        return max(self.terms, default=self.first - 1)

    def term_or_zero(self, index: int) -> int:
        return self.terms.get(index, 0)


def test_two_leaders_in_one_term_are_caught() -> None:
    checker = SafetyChecker()
    checker.observe_leader(1, 3, FakeLog({}))
    checker.observe_leader(1, 3, FakeLog({}))  # the same leader again is fine
    checker.observe_leader(2, 4, FakeLog({}))  # another term is fine
    with pytest.raises(SafetyViolation) as info:
        checker.observe_leader(2, 3, FakeLog({}))
    assert info.value.invariant == "election safety"
    assert "nodes 1 and 2" in str(info.value)


def test_observe_role_checks_each_new_leadership() -> None:
    checker = SafetyChecker()
    checker.observe_role(1, True, 5, FakeLog({}))
    checker.observe_role(1, False, 5, FakeLog({}))
    with pytest.raises(SafetyViolation):
        checker.observe_role(3, True, 5, FakeLog({}))


def test_log_matching_violations_are_caught() -> None:
    checker = SafetyChecker()
    checker.observe_persisted_entries(1, [Entry(1, 1, b"a"), Entry(2, 2, b"b")], prev_term=0)
    checker.observe_persisted_entries(2, [Entry(1, 1, b"a"), Entry(2, 2, b"b")], prev_term=0)
    with pytest.raises(SafetyViolation, match="log matching"):
        checker.observe_persisted_entries(3, [Entry(2, 2, b"other")], prev_term=1)
    with pytest.raises(SafetyViolation, match="log matching"):
        # same data, but preceded by a different term: the prefixes differ
        checker.observe_persisted_entries(3, [Entry(2, 2, b"b")], prev_term=2)


def test_state_machine_safety_violation_is_caught() -> None:
    checker = SafetyChecker()
    checker.observe_apply(1, Entry(1, 1, b"x"), node_term=1)
    checker.observe_apply(2, Entry(1, 1, b"x"), node_term=1)
    with pytest.raises(SafetyViolation, match="state machine safety"):
        checker.observe_apply(3, Entry(2, 1, b"y"), node_term=2)


def test_leader_missing_a_committed_entry_is_caught() -> None:
    checker = SafetyChecker()
    checker.observe_apply(1, Entry(1, 1, b"x"), node_term=1)
    checker.observe_apply(1, Entry(1, 2, b"y"), node_term=1)
    # a later leader whose log has something else at index 2
    with pytest.raises(SafetyViolation, match="leader completeness"):
        checker.observe_leader(2, 2, FakeLog({1: 1, 2: 2}))
    # a leader of the same term as the commit is not held to it (it may be stale)
    checker.observe_leader(3, 1, FakeLog({1: 1}))
    # compacted entries are covered by the snapshot check instead
    checker.observe_leader(4, 3, FakeLog({3: 3}, first=3))


def test_an_entry_committed_after_a_leader_was_elected_is_checked_against_it() -> None:
    checker = SafetyChecker()
    checker.observe_leader(2, 5, FakeLog({1: 5}))
    with pytest.raises(SafetyViolation, match="leader completeness"):
        checker.observe_apply(1, Entry(4, 1, b"x"), node_term=4)


def test_durability_violations_are_caught() -> None:
    checker = SafetyChecker()
    checker.observe_hard_state(1, HardState(term=2, vote=1, commit=5), last_index=5)
    with pytest.raises(SafetyViolation, match="commit index never goes backwards"):
        checker.observe_hard_state(1, HardState(term=2, vote=1, commit=4), last_index=5)
    with pytest.raises(SafetyViolation, match="one vote per term"):
        checker.observe_hard_state(1, HardState(term=2, vote=3, commit=5), last_index=5)
    with pytest.raises(SafetyViolation, match="term never goes backwards"):
        checker.observe_hard_state(1, HardState(term=1, vote=0, commit=5), last_index=5)
    with pytest.raises(SafetyViolation, match="within the persisted log"):
        checker.observe_hard_state(2, HardState(term=1, vote=0, commit=7), last_index=6)


def test_snapshot_with_wrong_contents_is_caught() -> None:
    checker = SafetyChecker()
    for i, data in enumerate([b"", b"a", b"b"], start=1):
        checker.observe_apply(1, Entry(1, i, data), node_term=1)
    checker.observe_snapshot(2, 3, [b"a", b"b"])
    with pytest.raises(SafetyViolation, match="snapshot"):
        checker.observe_snapshot(2, 3, [b"a"])
    with pytest.raises(SafetyViolation, match="never applied"):
        checker.observe_snapshot(2, 4, [b"a", b"b", b"c"])


def test_full_log_comparison_catches_a_divergent_prefix() -> None:
    checker = SafetyChecker()
    good = [Entry(1, 1, b"a"), Entry(1, 2, b"b"), Entry(2, 3, b"c")]
    checker.check_logs_match({1: (0, good), 2: (0, good[:2]), 3: (0, [Entry(3, 3, b"z")])})
    bad = [Entry(1, 1, b"X"), Entry(1, 2, b"b"), Entry(2, 3, b"c")]
    with pytest.raises(SafetyViolation, match="log matching"):
        checker.check_logs_match({1: (0, good), 2: (0, bad)})


def test_invariant_helper() -> None:
    invariant(True, "fine", lambda: "never built")
    with pytest.raises(SafetyViolation) as info:
        invariant(False, "rule", lambda: "evidence")
    assert (info.value.invariant, info.value.detail) == ("rule", "evidence")
