"""The tier in a directory: a shared volume (NFS, CephFS, a cloud file share) that the
brokers of a cluster may mount on different machines.

Create-only writes rest on ``link(2)``: the object is written and fsynced under a
private temporary name in its final directory, then hard-linked to its name. ``link``
is atomic and fails with ``EEXIST`` when the name is taken, on local file systems and
on NFS alike (it is the classic NFS-safe lock recipe; ``O_EXCL`` and ``rename`` are not
create-only there), so two brokers racing for one name cannot both win and a reader
never sees a half-written object. On NFS a retransmitted ``LINK`` whose first reply was
lost answers ``EEXIST`` although it succeeded; as ``open(2)`` advises, the temporary
file's link count then tells the truth.

The root itself is never created: a missing root usually means the volume is not
mounted, and writing into the bare mount point would put objects where no other broker
can see them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from rocketcluster.broker.tiered.backend import (
    BackendError,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
)

__all__ = ["TEMP_PREFIX", "PosixBackend", "check_name"]

#: Name prefix of in-flight writes; names with a part starting so are reserved.
TEMP_PREFIX: Final = ".tmp-"

#: How often a write retries when a concurrent delete removed the directory it had
#: just created (``delete`` prunes empty directories).
_DIRECTORY_RACE_RETRIES: Final = 3


def check_name(name: str) -> list[str]:
    """The parts of a valid object name; :class:`ValueError` for a name that is empty,
    absolute, has empty, ``.`` or ``..`` parts, a NUL or backslash, or a part reserved
    for temporary files. Both backends apply it, so a name valid in one is valid in
    the other and never escapes the root or prefix."""
    if not name:
        raise ValueError("object name is empty")
    if "\0" in name or "\\" in name:
        raise ValueError(f"object name {name!r} contains NUL or a backslash")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"object name {name!r} has an empty, '.' or '..' part")
        if part.startswith(TEMP_PREFIX):
            raise ValueError(f"object name {name!r} uses the reserved prefix {TEMP_PREFIX!r}")
    return parts


def _check_prefix(prefix: str) -> list[str]:
    """The directory parts of a list prefix ("a/b/c" → ["a", "b"]; the last part is
    matched as a string prefix of names)."""
    if prefix.startswith("/") or "\0" in prefix or "\\" in prefix:
        raise ValueError(f"prefix {prefix!r} is absolute or contains NUL or a backslash")
    directory = prefix.rpartition("/")[0]
    if not directory:
        return []
    parts = directory.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"prefix {prefix!r} has an empty, '.' or '..' part")
    return parts


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "OSError")


class PosixBackend:
    """Objects as files under ``root``; see the module docstring for the protocol.

    Blocking and thread-safe (it keeps no state but the root), and safe to share with
    other processes and machines mounting the same directory.
    """

    def __init__(self, root: Path) -> None:
        self._root = Path(root)

    @property
    def root(self) -> Path:
        return self._root

    def describe(self) -> str:
        return f"posix:{self._root}"

    def _error(self, action: str, name: str, exc: OSError) -> BackendError:
        """A readable error for the log and ``rocketctl tier status``."""
        hint = ""
        if exc.errno == errno.ENOSPC:
            hint = " (volume full)"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            hint = " (no write permission or read-only volume)"
        elif exc.errno in (errno.ESTALE, errno.EIO, errno.ENOTCONN):
            hint = " (volume unavailable)"
        return BackendError(
            f"{self.describe()}: cannot {action} {name!r}: "
            f"{_errno_name(exc)}: {exc.strerror or exc}{hint}"
        )

    def _root_missing(self) -> BackendError:
        return BackendError(
            f"{self.describe()}: the root directory does not exist (volume not mounted?)"
        )

    # -- writing -------------------------------------------------------------------

    def put_new(self, name: str, data: bytes | memoryview) -> None:
        parts = check_name(name)
        view = memoryview(data).cast("B")
        for attempt in range(_DIRECTORY_RACE_RETRIES):
            if not self._root.is_dir():
                raise self._root_missing()
            try:
                directory = self._make_parents(name, parts[:-1])
                self._write_and_link(directory, name, view)
                return
            except FileNotFoundError as exc:
                # A concurrent delete pruned a directory we had just made: make it
                # again, a bounded number of times.
                if attempt == _DIRECTORY_RACE_RETRIES - 1:
                    raise self._error("write", name, exc) from exc
            except OSError as exc:
                raise self._error("write", name, exc) from exc

    def _make_parents(self, name: str, dirs: Sequence[str]) -> Path:
        """Create the directories of ``name`` below the root (never the root itself),
        fsyncing each new entry into its parent so the object's path survives a
        crash once the final directory fsync is done."""
        path = self._root
        for part in dirs:
            parent, path = path, path / part
            try:
                os.mkdir(path)
            except FileExistsError:
                if not path.is_dir():
                    raise self._not_a_directory(name, path) from None
                continue
            _fsync_directory(parent)
        return path

    def _not_a_directory(self, name: str, path: Path) -> BackendError:
        """S3 lets ``a`` and ``a/b`` both be objects; a directory tree cannot."""
        kind = "a directory" if path.is_dir() else "an object"
        return BackendError(
            f"{self.describe()}: cannot write {name!r}: {path.relative_to(self._root)} is {kind}"
        )

    def _write_and_link(self, directory: Path, name: str, view: memoryview) -> None:
        temp = directory / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        final = self._root / name
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                _write_all(fd, view)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(temp, final)
            except FileExistsError:
                # On NFS a retried LINK whose first answer was lost says EEXIST although
                # it linked: then the temporary file has two links.
                if os.stat(temp).st_nlink != 2:
                    if final.is_dir():
                        raise self._not_a_directory(name, final) from None
                    raise ObjectExists(f"{self.describe()}: {name!r} exists") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        _fsync_directory(directory)

    # -- reading -------------------------------------------------------------------

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        check_name(name)
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"bad range [{start}, {end}) for {name!r}")
        path = self._root / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(name) from None
        except OSError as exc:
            raise self._error("read", name, exc) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise self._not_found(name)
            stop = info.st_size if end is None else min(end, info.st_size)
            return _pread_all(fd, start, max(0, stop - start))
        except OSError as exc:
            raise self._error("read", name, exc) from exc
        finally:
            os.close(fd)

    def _not_found(self, name: str) -> BackendError:
        if not self._root.is_dir():
            # An unmounted volume is an outage, not a missing object.
            return self._root_missing()
        return ObjectNotFound(f"{self.describe()}: no object {name!r}")

    def list(self, prefix: str) -> list[ObjectInfo]:
        dirs = _check_prefix(prefix)
        if not self._root.is_dir():
            raise self._root_missing()
        start = self._root.joinpath(*dirs)
        base = "/".join(dirs) + "/" if dirs else ""
        try:
            found = [info for info in self._walk(start, base) if info.name.startswith(prefix)]
        except OSError as exc:
            raise self._error("list", prefix, exc) from exc
        found.sort(key=lambda info: info.name)
        return found

    def _walk(self, directory: Path, base: str) -> Iterator[ObjectInfo]:
        """Regular files below ``directory`` named ``base + relative path``; entries
        that vanish while walking (a concurrent delete) are skipped."""
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.startswith(TEMP_PREFIX):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    yield from self._walk(Path(entry.path), f"{base}{entry.name}/")
                elif entry.is_file(follow_symlinks=False):
                    yield ObjectInfo(
                        f"{base}{entry.name}", entry.stat(follow_symlinks=False).st_size
                    )
            except FileNotFoundError:
                continue

    # -- deleting ------------------------------------------------------------------

    def delete(self, names: Sequence[str]) -> None:
        checked = [(name, check_name(name)) for name in names]
        if not self._root.is_dir():
            raise self._root_missing()
        for name, parts in checked:
            try:
                os.unlink(self._root / name)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                pass  # gone already, or never an object (a directory, a path under a file)
            except OSError as exc:
                raise self._error("delete", name, exc) from exc
            self._prune(parts[:-1])

    def _prune(self, dirs: Sequence[str]) -> None:
        """Remove the now-empty directories of a deleted object, deepest first, never
        the root; best effort (a concurrent writer may be filling one again)."""
        for depth in range(len(dirs), 0, -1):
            try:
                os.rmdir(self._root.joinpath(*dirs[:depth]))
            except OSError:
                return


def _write_all(fd: int, view: memoryview) -> None:
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def _fsync_directory(path: Path) -> None:
    """Make a directory's new or removed entries durable. File systems that cannot
    fsync a directory (some FUSE and network ones: EINVAL, ENOTSUP) make their
    directory changes durable by themselves or not at all; that is not an error."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)
