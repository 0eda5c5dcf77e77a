"""What /proc says of a process that runs inside an image: its descendants (a
``buildah run`` starts the container's process as its child), its command line, its
user and its root directory (a chroot-isolated container's is its image's file
system, not ``/``). For tests that check where and as whom a process really runs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    """The command line, space-separated; "" when the process is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def uid(pid: int) -> int:
    """The real user id."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError(f"no Uid in /proc/{pid}/status")


def root(pid: int) -> str:
    """The process's root directory as the host sees it."""
    return os.readlink(f"/proc/{pid}/root")
