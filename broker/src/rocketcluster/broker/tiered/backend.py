"""What the tier stores objects in: a flat namespace of immutable, write-once objects.

Two implementations ship — a POSIX directory (a shared volume) and S3 — and the tier
asks nothing of them beyond this: create an object only if its name is free (so two
brokers that both believe they lead can never both write one segment), read a byte
range, list by prefix, delete. Calls block (the tier runs them on worker threads).
Names are ``/``-separated keys relative to the backend's root or prefix; a name that
is empty, absolute, has empty, ``.`` or ``..`` parts or a part starting with ``.tmp-``
is refused with :class:`ValueError` by both backends (``posix.check_name``). A name
cannot be both an object and a prefix of another one's directories on a POSIX volume
(``a`` and ``a/b``): keep segment names at one depth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class BackendError(Exception):
    """The backend failed or could not be reached; the outcome of a write may be
    unknown (ask the backend again before deciding)."""


class ObjectExists(BackendError):
    """A create-only write found the name taken: another writer (or an earlier try of
    ours whose answer was lost) wrote it first."""


class ObjectNotFound(BackendError):
    """No object has this name."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    name: str
    size: int


class TierBackend(Protocol):
    def put_new(self, name: str, data: bytes | memoryview) -> None:
        """Create ``name`` holding ``data``, atomically: readers see all of it or
        nothing. Raises :class:`ObjectExists` when the name is taken."""
        ...

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of an object (``end`` None: to its end), cut short at
        the object's end like a slice (``b""`` from at or past it). Raises
        :class:`ObjectNotFound` when there is no such object."""
        ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose name starts with ``prefix`` (a plain string prefix:
        ``"a/b"`` matches ``"a/bc/1"``, ``"a/b/"`` does not), sorted by name."""
        ...

    def delete(self, names: Sequence[str]) -> None:
        """Remove these objects; names already gone are not an error."""
        ...

    def describe(self) -> str:
        """Where the objects live, for logs and ``rocketctl tier status``."""
        ...
