"""What the store asks of tiered storage, which lives above it (broker/tiered): the
store never imports the tier, the tier attaches itself (``MessageStore.attach_tier``)."""

from __future__ import annotations

from typing import Protocol


class TierView(Protocol):
    def held_from(self) -> int | None:
        """The commit-log offset from which local data is not all in the tier yet:
        retention deletes nothing past it. None: everything is uploaded."""
        ...

    def lowest_physical(self) -> int | None:
        """The oldest commit-log position the tier holds: index entries from there on
        stay, so lookups by key or id reach tiered messages."""
        ...

    def queue_start(self, topic: str, queue_id: int) -> int | None:
        """The tier's first offset of a queue when reads may be served from it."""
        ...
