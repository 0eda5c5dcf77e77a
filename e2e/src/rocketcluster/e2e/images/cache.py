"""Where builds keep what is slow to make: base tarballs, the wheelhouse, wheels
built from source distributions.

``$ROCKETCLUSTER_IMAGE_CACHE``, else ``$XDG_CACHE_HOME/rocketcluster/images``, else
``~/.cache/rocketcluster/images`` — beside the kubectl/helm cache (``…/bin``). Each
entry is a directory named by its key, made under a temporary name and renamed into
place when complete, so a half-made entry is never used; one build at a time holds
the cache's lock (a test session and ``make images`` may start together).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

ENV_CACHE = "ROCKETCLUSTER_IMAGE_CACHE"


def cache_root() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocketcluster" / "images"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[Path]:
    """Hold the cache's lock while building (waits for another build to finish)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def entry(parent: Path, key: str) -> Path:
    return parent / key


def staging(parent: Path, key: str) -> Path:
    """An empty directory to make the entry in; :func:`publish` puts it in place.
    Temporaries of the same key that a failed or killed build left are removed (the
    caller holds the lock, so no other build is making one)."""
    if parent.is_dir():
        for abandoned in parent.glob(f".{key}.*.tmp"):
            shutil.rmtree(abandoned, ignore_errors=True)
    path = parent / f".{key}.{os.getpid()}.tmp"
    path.mkdir(parents=True)
    return path


def publish(tmp: Path, parent: Path, key: str) -> Path:
    final = entry(parent, key)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def prune(parent: Path, keep: str) -> list[str]:
    """Remove every other entry (older keys, abandoned temporaries): one current
    entry per kind is what a build needs, and wheelhouses are hundreds of MB."""
    removed = []
    if parent.is_dir():
        for path in parent.iterdir():
            if path.name != keep:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
    return removed


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link (the cache and the build contexts share a file system), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
