"""QueueConsumeState: POP consumption of one queue by one consumer group (pure).

Offsets below ``committed`` are done (acknowledged, filtered out or sent to the DLQ).
``next_offset`` is the first offset never delivered. Between them, each offset is
either in flight (delivered, invisible until its deadline), waiting for redelivery
(its invisibility expired), or done out of order. Time is passed in (milliseconds),
so the rules are tested without a clock.

FIFO groups: while any message of the queue is in flight and not expired, nothing is
delivered from the queue; expired ones are redelivered first, in offset order, so the
order of every message group in the queue is kept across retries.

Replication: on the master every transition is also handed to ``sink`` as an *op* (a
JSON-ready list, see pop_journal.py) carrying absolute deadlines, nonces and attempts,
so a slave applying the same ops in the same order holds the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Op = list[Any]  # ["D", offset, attempt, deadline, nonce, client, auto_renew] … (pop_journal)


@dataclass(slots=True)
class Inflight:
    attempt: int  # how many times this message has been delivered, this one included
    deadline_ms: int  # invisible until then
    nonce: int
    client_id: str = ""
    auto_renew: bool = False


class QueueConsumeState:
    def __init__(self, committed: int) -> None:
        self.committed = committed
        self.next_offset = committed
        self.inflight: dict[int, Inflight] = {}
        # Delivered, not done, not in flight: waiting for redelivery, with attempts so far.
        self.waiting: dict[int, int] = {}
        self.done: set[int] = set()
        self.dirty = True
        # Where transitions are recorded (the master's POP journal); None: not recorded.
        self.sink: Callable[[Op], None] | None = None

    # -- queries -----------------------------------------------------------------

    def blocked_for_fifo(self, now_ms: int) -> bool:
        return any(f.deadline_ms > now_ms for f in self.inflight.values())

    def redeliverable(self, now_ms: int) -> list[tuple[int, int]]:
        """(offset, attempts so far) of messages to deliver again, in offset order."""
        due = [(o, f.attempt) for o, f in self.inflight.items() if f.deadline_ms <= now_ms]
        due += list(self.waiting.items())
        due.sort()
        return due

    def inflight_count(self, now_ms: int | None = None) -> int:
        """Deliveries still invisible at ``now_ms`` (all of them when no time is
        given): an expired one is ready to deliver again, no longer in flight."""
        if now_ms is None:
            return len(self.inflight)
        return sum(1 for f in self.inflight.values() if f.deadline_ms > now_ms)

    def unacked(self) -> int:
        return self.next_offset - self.committed - len(self.done)

    def lag(self, end: int) -> int:
        """Messages of ``[committed, end)`` not acknowledged (nor filtered out or
        dead-lettered): those in flight plus those ready (``end``: the queue's end)."""
        return max(0, end - self.committed - len(self.done))

    def ready(self, end: int, now_ms: int) -> int:
        """Messages a receive would be given at ``now_ms``: never delivered, waiting
        for redelivery, or whose invisibility expired."""
        return self.lag(end) - self.inflight_count(now_ms)

    # -- transitions -------------------------------------------------------------

    def deliver(
        self,
        offset: int,
        attempt: int,
        deadline_ms: int,
        nonce: int,
        client_id: str = "",
        auto_renew: bool = False,
    ) -> None:
        if offset < self.committed or offset in self.done:
            raise ValueError(f"offset {offset} is already done")
        if offset > self.next_offset:
            raise ValueError(f"offset {offset} skips {self.next_offset}")
        if offset == self.next_offset:
            self.next_offset += 1
        self.waiting.pop(offset, None)
        self.inflight[offset] = Inflight(attempt, deadline_ms, nonce, client_id, auto_renew)
        self.dirty = True
        if self.sink is not None:
            self.sink(["D", offset, attempt, deadline_ms, nonce, client_id, int(auto_renew)])

    def mark_done(self, offset: int) -> bool:
        """Ack (or filter, or DLQ) ``offset``; False when it was already done.

        Recorded even when already done: a repeated ack must reach the replicas too
        (its first journal write may have failed after the state changed here)."""
        if self.sink is not None and offset < self.next_offset:
            self.sink(["K", offset])
        return self._mark_done(offset)

    def _mark_done(self, offset: int) -> bool:
        if offset < self.committed or offset in self.done or offset >= self.next_offset:
            return False
        self.inflight.pop(offset, None)
        self.waiting.pop(offset, None)
        self.done.add(offset)
        while self.committed in self.done:
            self.done.remove(self.committed)
            self.committed += 1
        self.dirty = True
        return True

    def skip_new(self, offset: int) -> None:
        """A never-delivered message the group does not want (filtered, removed)."""
        if offset != self.next_offset:
            raise ValueError(f"skip of {offset}, next is {self.next_offset}")
        self.next_offset += 1
        self._mark_done(offset)
        if self.sink is not None:
            self.sink(["S", offset])

    def change_invisible(self, offset: int, deadline_ms: int, nonce: int) -> Inflight | None:
        entry = self.inflight.get(offset)
        if entry is None:
            return None
        entry.deadline_ms = deadline_ms
        entry.nonce = nonce
        entry.auto_renew = False
        self.dirty = True
        if self.sink is not None:
            self.sink(["I", offset, deadline_ms, nonce])
        return entry

    def make_visible(self, offset: int) -> None:
        """Stop the invisibility now (a released or nacked delivery)."""
        entry = self.inflight.pop(offset, None)
        if entry is not None:
            self.waiting[offset] = entry.attempt
            self.dirty = True
            if self.sink is not None:
                self.sink(["V", offset])

    def release_client(self, client_id: str) -> list[int]:
        """The client went away: its deliveries become visible (the offsets)."""
        released = [o for o, f in self.inflight.items() if f.client_id == client_id]
        for offset in released:
            self.make_visible(offset)
        return released

    def renew(self, now_ms: int, extend_ms: int, alive: set[str]) -> list[int]:
        """Keep auto-renewed deliveries of live clients invisible; returns the offsets
        made visible because their client is gone."""
        released = []
        for offset, entry in list(self.inflight.items()):
            if entry.auto_renew and entry.deadline_ms - now_ms < extend_ms // 2:
                if entry.client_id in alive:
                    self.extend(offset, now_ms + extend_ms)
                else:
                    self.make_visible(offset)
                    released.append(offset)
        return released

    def extend(self, offset: int, deadline_ms: int) -> None:
        """An auto-renewed delivery stays invisible longer (same nonce, same handle)."""
        entry = self.inflight.get(offset)
        if entry is not None:
            entry.deadline_ms = deadline_ms
            self.dirty = True
            if self.sink is not None:
                self.sink(["E", offset, deadline_ms])

    def advance_to(self, min_offset: int) -> None:
        """Retention removed everything below ``min_offset``: it counts as done."""
        if self.committed >= min_offset:
            return
        if self.sink is not None:
            self.sink(["A", min_offset])
        for offset in [o for o in self.inflight if o < min_offset]:
            del self.inflight[offset]
        for offset in [o for o in self.waiting if o < min_offset]:
            del self.waiting[offset]
        self.done = {o for o in self.done if o >= min_offset}
        self.committed = min_offset
        self.next_offset = max(self.next_offset, min_offset)
        while self.committed in self.done:
            self.done.remove(self.committed)
            self.committed += 1
        self.dirty = True

    def reset_to(self, offset: int) -> None:
        """An operator moved the group's offset: forget deliveries, start there."""
        if self.sink is not None:
            self.sink(["R", offset])
        self.committed = self.next_offset = offset
        self.inflight.clear()
        self.waiting.clear()
        self.done.clear()
        self.dirty = True

    # -- persistence -------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        pending = {o: f.attempt for o, f in self.inflight.items()}
        pending.update(self.waiting)
        return {
            "committed": self.committed,
            "next": self.next_offset,
            "pending": [[o, a] for o, a in sorted(pending.items())],
            "done": _ranges(sorted(self.done)),
        }

    def full_snapshot(self) -> dict[str, Any]:
        """Everything, deliveries in flight included (the journal's compact form)."""
        return {
            "c": self.committed,
            "n": self.next_offset,
            "f": [
                [o, f.attempt, f.deadline_ms, f.nonce, f.client_id, int(f.auto_renew)]
                for o, f in sorted(self.inflight.items())
            ],
            "w": [[o, a] for o, a in sorted(self.waiting.items())],
            "d": _ranges(sorted(self.done)),
        }

    @classmethod
    def from_full(cls, data: dict[str, Any]) -> QueueConsumeState:
        state = cls(int(data["c"]))
        state.next_offset = int(data["n"])
        for o, attempt, deadline, nonce, client, auto in data.get("f", []):
            state.inflight[int(o)] = Inflight(
                int(attempt), int(deadline), int(nonce), str(client), bool(auto)
            )
        state.waiting = {int(o): int(a) for o, a in data.get("w", [])}
        for start, end in data.get("d", []):
            state.done.update(range(int(start), int(end)))
        return state

    def release_all(self) -> int:
        """A restarted broker: every delivery in flight becomes visible (its clients
        may be gone; the attempt counts stay). Not recorded: each replica does it when
        it restarts."""
        released = list(self.inflight)
        for offset in released:
            entry = self.inflight.pop(offset)
            self.waiting[offset] = entry.attempt
        self.dirty = self.dirty or bool(released)
        return len(released)

    @classmethod
    def restore(cls, data: dict[str, Any]) -> QueueConsumeState:
        """After a restart every delivery that was in flight is redelivered (with its
        attempt count kept), so nothing acknowledged is lost and nothing is stuck."""
        state = cls(int(data["committed"]))
        state.next_offset = max(int(data["next"]), state.committed)
        for offset, attempts in data.get("pending", []):
            if offset >= state.committed:
                state.waiting[int(offset)] = int(attempts)
        for start, end in data.get("done", []):
            state.done.update(range(int(start), int(end)))
        state.done = {o for o in state.done if o >= state.committed}
        return state


def _ranges(offsets: list[int]) -> list[list[int]]:
    """Sorted offsets as [start, end) ranges, so a long run of acks stays small."""
    ranges: list[list[int]] = []
    for offset in offsets:
        if ranges and ranges[-1][1] == offset:
            ranges[-1][1] = offset + 1
        else:
            ranges.append([offset, offset + 1])
    return ranges
