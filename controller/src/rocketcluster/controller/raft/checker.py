"""Raft's safety properties, checked from the outside on every simulator step.

The checker sees only what an observer could: roles and terms, what each node persisted,
what each node applied, and read access to logs. It is separate from the core so a bug
in the core cannot also hide itself here. Checks are incremental (O(1) per entry) so they
can run on every step; `check_logs_match` does the full pairwise comparison.

Properties (Raft paper, Figure 3), plus two about durability:
- election safety: at most one leader per term;
- log matching: entries with the same index and term hold the same data and are preceded
  by identical logs (checked as: same (index, term) => same data and same previous term,
  which implies the whole prefix by induction);
- leader completeness: an entry committed in term T is in the log of every leader of a
  term > T;
- state machine safety: no two nodes apply different entries at the same index, and a
  snapshot holds exactly the commands committed up to its index;
- persisted commit never goes backwards, term never goes backwards, and a node never
  changes its persisted vote within a term.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rocketcluster.controller.raft.types import Entry, HardState


class SafetyViolation(Exception):
    """An invariant failed. `invariant` names it; `detail` has the evidence."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def invariant(condition: bool, name: str, detail: str | Callable[[], str]) -> None:
    """Raise `SafetyViolation` unless `condition`; `detail` may be lazy (a callable)."""
    if not condition:
        raise SafetyViolation(name, detail() if callable(detail) else detail)


class LogView(Protocol):
    """Read access to one node's log (`RaftLog` satisfies it)."""

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_or_zero(self, index: int) -> int: ...


@dataclass(frozen=True, slots=True)
class _Committed:
    term: int
    data: bytes
    # An upper bound on the term in which the entry was committed: the smallest term any
    # node was in when it applied the entry.
    commit_term: int


class SafetyChecker:
    def __init__(self) -> None:
        self._leader_of_term: dict[int, int] = {}
        self._active_leaders: dict[int, tuple[int, LogView]] = {}
        self._entry_ids: dict[tuple[int, int], tuple[bytes, int]] = {}
        self._committed: dict[int, _Committed] = {}
        self._hard_states: dict[int, HardState] = {}
        self.max_term = 0

    # --- roles ------------------------------------------------------------------------

    def observe_role(self, node: int, is_leader: bool, term: int, log: LogView) -> None:
        """Call after every step of `node` (cheap unless it just became leader)."""
        if not is_leader:
            self._active_leaders.pop(node, None)
            return
        current = self._active_leaders.get(node)
        if current is not None and current[0] == term:
            return
        self.observe_leader(node, term, log)

    def observe_leader(self, node: int, term: int, log: LogView) -> None:
        """`node` is leader in `term`: check election safety and leader completeness."""
        holder = self._leader_of_term.setdefault(term, node)
        invariant(
            holder == node,
            "election safety",
            lambda: f"nodes {holder} and {node} are both leader in term {term}",
        )
        self.max_term = max(self.max_term, term)
        self._active_leaders[node] = (term, log)
        for index, c in self._committed.items():
            if c.commit_term < term:
                self._check_leader_has(node, term, log, index, c)

    def leader_lost(self, node: int) -> None:
        """`node` crashed or stepped down."""
        self._active_leaders.pop(node, None)

    def _check_leader_has(
        self, node: int, term: int, log: LogView, index: int, c: _Committed
    ) -> None:
        if index < log.first_index():
            return  # folded into its snapshot, which is checked against commits itself
        found = log.term_or_zero(index) if index <= log.last_index() else 0
        invariant(
            found == c.term,
            "leader completeness",
            lambda: (
                f"leader {node} of term {term} has term {found} at index {index}, but an "
                f"entry of term {c.term} was committed there by term {c.commit_term}"
            ),
        )

    # --- persistence ------------------------------------------------------------------

    def observe_persisted_entries(
        self, node: int, entries: Sequence[Entry], prev_term: int
    ) -> None:
        """`node` durably appended `entries`; `prev_term` is its term just before them."""
        ids = self._entry_ids
        for e in entries:
            key = (e.index, e.term)
            seen = ids.get(key)
            if seen is None:
                ids[key] = (e.data, prev_term)
            elif seen != (e.data, prev_term):
                raise SafetyViolation(
                    "log matching",
                    f"node {node} holds index {e.index} term {e.term} with data {e.data!r} "
                    f"after term {prev_term}, another node had {seen[0]!r} after term {seen[1]}",
                )
            prev_term = e.term

    def observe_hard_state(self, node: int, hard_state: HardState, last_index: int) -> None:
        """`node` durably wrote `hard_state`; `last_index` is its persisted log end."""
        # Plain `if`s rather than `invariant(...)`: this runs on every write, and each
        # call would build its lazy message closure even when the check passes.
        previous = self._hard_states.get(node)
        if hard_state.commit > last_index:
            raise SafetyViolation(
                "persisted commit within the persisted log",
                f"node {node} persisted commit {hard_state.commit} > last {last_index}",
            )
        if previous is not None:
            if hard_state.commit < previous.commit:
                raise SafetyViolation(
                    "commit index never goes backwards",
                    f"node {node} commit {previous.commit} -> {hard_state.commit}",
                )
            if hard_state.term < previous.term:
                raise SafetyViolation(
                    "term never goes backwards",
                    f"node {node} term {previous.term} -> {hard_state.term}",
                )
            if hard_state.term == previous.term and previous.vote not in (0, hard_state.vote):
                raise SafetyViolation(
                    "one vote per term",
                    f"node {node} changed its vote in term {hard_state.term} "
                    f"from {previous.vote} to {hard_state.vote}",
                )
        self._hard_states[node] = hard_state

    # --- the state machine ------------------------------------------------------------

    def observe_apply(self, node: int, entry: Entry, node_term: int) -> None:
        """`node` applied `entry` while in `node_term`."""
        index = entry.index
        c = self._committed.get(index)
        if c is None:
            c = _Committed(entry.term, entry.data, node_term)
            self._committed[index] = c
            for leader, (term, log) in self._active_leaders.items():
                if term > node_term:
                    self._check_leader_has(leader, term, log, index, c)
            return
        if c.term != entry.term or c.data != entry.data:
            raise SafetyViolation(
                "state machine safety",
                f"node {node} applied term {entry.term} {entry.data!r} at index {index}, "
                f"another node applied term {c.term} {c.data!r}",
            )
        if node_term < c.commit_term:
            self._committed[index] = _Committed(c.term, c.data, node_term)

    def observe_snapshot(self, node: int, index: int, commands: Sequence[bytes]) -> None:
        """`node` loaded a snapshot at `index` holding `commands` (non-empty entries)."""
        expected: list[bytes] = []
        for i in range(1, index + 1):
            c = self._committed.get(i)
            if c is None:
                raise SafetyViolation(
                    "snapshot covers committed entries only",
                    f"node {node} loaded a snapshot at {index}, but index {i} was never applied",
                )
            if c.data:
                expected.append(c.data)
        invariant(
            list(commands) == expected,
            "state machine safety (snapshot)",
            lambda: f"node {node} snapshot at {index} differs from the committed commands",
        )

    def committed_count(self) -> int:
        return len(self._committed)

    # --- whole-log comparison ---------------------------------------------------------

    def check_logs_match(self, logs: Mapping[int, tuple[int, Iterable[Entry]]]) -> None:
        """Full log matching over every pair: `logs[node] = (snapshot_index, entries)`."""
        by_node = {n: {e.index: e for e in ents} for n, (_, ents) in logs.items()}
        nodes = sorted(by_node)
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                la, lb = by_node[a], by_node[b]
                common = sorted(set(la) & set(lb), reverse=True)
                matched = False
                for index in common:
                    ea, eb = la[index], lb[index]
                    if ea.term == eb.term:
                        matched = True
                    if matched and ea != eb:
                        raise SafetyViolation("log matching", f"nodes {a}, {b}: {ea} vs {eb}")
