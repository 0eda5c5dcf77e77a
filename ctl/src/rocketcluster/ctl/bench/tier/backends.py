"""Where the in-process cases' tiers go (a directory for POSIX, a bucket of the
benchmark's S3 server under a prefix per case), and how what a case uploaded is deleted
again, in-process or through a broker: moto keeps every object until it stops, and the
cases share one server.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.ctl.bench.s3_process import S3Endpoint
from rocketcluster.ctl.bench.tier.settings import CLUSTER


@dataclass(frozen=True)
class Backends:
    """Where the tiers go: a directory for POSIX, and an S3 endpoint (or none)."""

    posix_root: Path
    s3: Callable[[str], TierBackend] | None  # a backend under the given prefix

    def make(self, kind: str, name: str) -> TierBackend:
        if kind == "posix":
            root = self.posix_root / name
            root.mkdir(parents=True)
            return PosixBackend(root)
        if self.s3 is None:
            raise ValueError("no S3 endpoint")
        return self.s3(name)


def s3_backends(server: S3Endpoint) -> Callable[[str], TierBackend]:
    """Backends on ``server``'s bucket, each under the prefix it is given."""
    from rocketcluster.broker.tiered.s3 import S3Backend

    def make(name: str) -> TierBackend:
        return S3Backend(
            server.bucket,
            prefix=name,
            endpoint=server.endpoint,
            region=server.region,
            access_key=server.access_key,
            secret_key=server.secret_key,
        )

    return make


def delete_uploads(backend: TierBackend, name: str) -> None:
    """Delete what a case uploaded (moto would keep it until it stops)."""
    if isinstance(backend, PosixBackend):
        shutil.rmtree(backend.root, ignore_errors=True)
        return
    names = [info.name for info in backend.list(f"{CLUSTER}/")]
    if names:
        backend.delete(names)
