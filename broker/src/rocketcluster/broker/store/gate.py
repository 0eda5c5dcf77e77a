"""WriteGate: where commit-log appends wait while a master hands its role over.

A graceful switchover needs a final log end: the master closes the gate, waits until
the designated slave holds everything up to that end, and only then is deposed. A
request that arrives meanwhile waits here instead of failing, and when the gate opens
it finds the broker either still master (it proceeds) or a slave that knows the new
master (the client request is forwarded there). Open, the gate costs one attribute
check per append; it never creates anything per message.
"""

from __future__ import annotations

import asyncio


class WriteGate:
    __slots__ = ("_opened", "closed", "reason")

    def __init__(self) -> None:
        # Read on every append: a plain attribute, not a property.
        self.closed = False
        self.reason = ""
        self._opened: asyncio.Future[None] | None = None

    def close(self, reason: str) -> None:
        """Pause every append from now on (idempotent: the reason is updated)."""
        self.reason = reason
        if not self.closed:
            self.closed = True
            self._opened = asyncio.get_running_loop().create_future()

    def open(self) -> None:
        """Let every waiting append go on (each checks again what the broker is now)."""
        self.closed = False
        self.reason = ""
        opened, self._opened = self._opened, None
        if opened is not None and not opened.done():
            opened.set_result(None)

    async def passage(self) -> None:
        """Return once the gate is open; a gate closed again before the waiter ran
        holds it again, so nothing passes a closed gate."""
        while self.closed:
            opened = self._opened
            assert opened is not None
            await asyncio.shield(opened)  # one shared future: a cancelled waiter leaves it
