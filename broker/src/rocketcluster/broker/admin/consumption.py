"""Where consumer groups stand on the queues they consume here: the rows of
/v1/consumption, /v1/groups/NAME/offsets and /v1/groups/NAME/status."""

from __future__ import annotations

import time
from typing import Any

from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.runtime import MessagingRuntime

Key = tuple[str, str, int]  # (group, topic, queue id)


def consumption_rows(rt: MessagingRuntime, keys: list[Key]) -> list[dict[str, Any]]:
    """Where each (group, topic, queue id) stands. ``lag`` counts the messages not
    acknowledged yet: ``inflight`` (delivered, invisible now) plus ``ready`` (a
    receive would get them now: never delivered, or visible again). A group whose
    consumption state is not loaded shows its saved offset."""
    store = rt.store
    now = int(time.time() * 1000)
    live = rt.pop.states()
    saved = store.metadata.all_offsets()
    rows = []
    for key in keys:
        group, topic, qid = key
        lo, hi = store.queue_offsets(topic, qid)
        state = live.get(key)
        if state is None:
            state = QueueConsumeState(max(saved.get(key, lo), lo))
        lag = state.lag(hi)
        inflight = state.inflight_count(now)
        rows.append(
            {
                "group": group,
                "topic": topic,
                "queueId": qid,
                "committedOffset": state.committed,
                "nextOffset": state.next_offset,
                "minOffset": lo,
                "maxOffset": hi,
                "lag": lag,
                "inflight": inflight,
                "ready": lag - inflight,
            }
        )
    return rows


def consumed_keys(rt: MessagingRuntime, group: str | None = None) -> list[Key]:
    """The queues consumed by ``group`` (by every group that exists: offsets a
    deleted group left behind are no one's)."""
    keys = rt.pop.states().keys() | rt.store.metadata.all_offsets().keys()
    groups = {group} if group is not None else {g.name for g in rt.registry.groups()}
    return sorted(k for k in keys if k[0] in groups)
