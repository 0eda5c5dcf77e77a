"""The POP rules, without a clock or a broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketcluster.broker.messaging.consume_state import QueueConsumeState


def test_acks_out_of_order_move_the_committed_offset_only_when_contiguous() -> None:
    s = QueueConsumeState(0)
    for offset in range(4):
        s.deliver(offset, 1, deadline_ms=100, nonce=offset)
    assert s.mark_done(2) and s.committed == 0
    assert s.mark_done(0) and s.committed == 1
    assert s.mark_done(1) and s.committed == 3
    assert not s.mark_done(1)  # twice is harmless
    assert s.unacked() == 1


def test_expired_deliveries_come_back_first_with_their_attempts() -> None:
    s = QueueConsumeState(10)
    s.deliver(10, 1, deadline_ms=100, nonce=1)
    s.deliver(11, 3, deadline_ms=500, nonce=2)
    assert s.redeliverable(now_ms=99) == []
    assert s.redeliverable(now_ms=100) == [(10, 1)]
    assert s.redeliverable(now_ms=600) == [(10, 1), (11, 3)]


def test_fifo_blocking_while_a_delivery_is_invisible() -> None:
    s = QueueConsumeState(0)
    s.deliver(0, 1, deadline_ms=100, nonce=1)
    assert s.blocked_for_fifo(now_ms=50)
    assert not s.blocked_for_fifo(now_ms=100)  # expired: redelivered first, in order
    s.mark_done(0)
    assert not s.blocked_for_fifo(now_ms=50)


def test_change_invisible_needs_the_current_delivery() -> None:
    s = QueueConsumeState(0)
    s.deliver(0, 1, deadline_ms=100, nonce=7)
    entry = s.change_invisible(0, deadline_ms=5000, nonce=8)
    assert entry is not None and entry.deadline_ms == 5000 and entry.nonce == 8
    assert s.change_invisible(1, 10, 9) is None


def test_a_gone_client_releases_its_auto_renewed_messages() -> None:
    s = QueueConsumeState(0)
    s.deliver(0, 1, deadline_ms=60_000, nonce=1, client_id="a", auto_renew=True)
    s.deliver(1, 1, deadline_ms=60_000, nonce=2, client_id="b", auto_renew=True)
    s.renew(now_ms=40_000, extend_ms=60_000, alive={"a"})
    assert s.inflight[0].deadline_ms == 100_000
    assert 1 not in s.inflight and s.redeliverable(now_ms=0) == [(1, 1)]
    assert s.release_client("a") == [0] and s.redeliverable(0) == [(0, 1), (1, 1)]


def test_filtered_messages_count_as_done() -> None:
    s = QueueConsumeState(0)
    s.skip_new(0)
    s.deliver(1, 1, 100, 1)
    s.skip_new(2)
    assert s.committed == 1 and s.next_offset == 3
    s.mark_done(1)
    assert s.committed == 3
    with pytest.raises(ValueError, match="skip"):
        s.skip_new(7)


def test_snapshot_restores_in_flight_as_due_for_redelivery() -> None:
    s = QueueConsumeState(5)
    for offset in range(5, 12):
        s.deliver(offset, 2 if offset == 6 else 1, deadline_ms=10**12, nonce=offset)
    for offset in (5, 8, 9, 10):
        s.mark_done(offset)
    restored = QueueConsumeState.restore(s.snapshot())
    assert restored.committed == 6 and restored.next_offset == 12
    assert restored.done == {8, 9, 10}
    assert restored.redeliverable(now_ms=0) == [(6, 2), (7, 1), (11, 1)]


def test_retention_moves_the_group_forward() -> None:
    s = QueueConsumeState(0)
    s.deliver(0, 1, 100, 1)
    s.deliver(1, 1, 100, 2)
    s.mark_done(1)
    s.advance_to(1)
    assert s.committed == 2 and not s.inflight and not s.done


def test_lag_splits_into_in_flight_and_ready() -> None:
    """In flight is what is invisible now; an expired delivery is ready again, like a
    message never delivered; acknowledged ones are in neither, in order or not."""
    s = QueueConsumeState(0)
    for offset in range(4):
        s.deliver(offset, 1, deadline_ms=100 + offset * 100, nonce=offset)
    s.mark_done(2)  # acknowledged out of order
    end = 10  # six more never delivered
    assert s.lag(end) == 9
    assert (s.inflight_count(now_ms=50), s.ready(end, now_ms=50)) == (3, 6)
    assert (s.inflight_count(now_ms=250), s.ready(end, now_ms=250)) == (1, 8)  # 0, 1 expired
    s.make_visible(3)  # nacked: waiting, ready
    assert (s.inflight_count(now_ms=250), s.ready(end, now_ms=250)) == (0, 9)
    assert s.inflight_count() == 2  # without a time: every delivery not acked


@given(
    st.lists(
        st.tuples(st.sampled_from("DKVS"), st.integers(0, 12), st.integers(0, 400)),
        max_size=60,
    ),
    st.integers(0, 400),
)
def test_lag_is_in_flight_plus_ready_whatever_happened(
    ops: list[tuple[str, int, int]], now: int
) -> None:
    end = 13
    s = QueueConsumeState(0)
    for kind, offset, at in ops:
        if kind == "D" and offset <= s.next_offset and offset not in s.done:
            if offset >= s.committed and offset < end:
                s.deliver(offset, 1, deadline_ms=at, nonce=at)
        elif kind == "K":
            s.mark_done(offset)
        elif kind == "V":
            s.make_visible(offset)
        elif kind == "S" and offset == s.next_offset < end:
            s.skip_new(offset)
    ready = s.ready(end, now)
    assert s.lag(end) == s.inflight_count(now) + ready
    assert ready == len(s.redeliverable(now)) + (end - s.next_offset)
