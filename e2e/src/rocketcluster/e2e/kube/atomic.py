"""Whole-file replacement, for files that something else reads while they change: a
pod's ConfigMap files, ``hosts.json`` and ``realiser.json``, the kubeconfig, the
kubectl and helm binaries that other test processes may be running."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` by one rename, so a reader sees the old file or
    the new one, never half of one. The temporary file is hidden (its name starts
    with a dot) and named after this process, so two writers never share it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)
