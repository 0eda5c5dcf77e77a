"""The external programs a build runs, found or refused with what to install.

buildah and mmdebstrap are Debian packages (``make images`` installs them); uv and
pip run as modules of a Python that has them, as the Makefile runs uv. Every
command's output is kept: a failure shows its last lines, not a bare exit code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# The Debian package that provides each program.
APT_PACKAGES = {
    "buildah": "buildah",
    "mmdebstrap": "mmdebstrap",
    "git": "git",
    "docker-registry": "docker-registry",  # the tests' local registry to push to
}
FAILURE_LINES = 40


class ToolMissing(RuntimeError):
    """A program the build needs is not installed; the message says how to get it."""


class CommandFailed(RuntimeError):
    def __init__(
        self, argv: Sequence[str], code: int, output: str, log: Path | None = None
    ) -> None:
        self.argv, self.code, self.output = list(argv), code, output
        tail = "\n".join(output.rstrip().splitlines()[-FAILURE_LINES:])
        where = f"\n(the whole output is in {log})" if log is not None else ""
        super().__init__(f"{' '.join(argv[:4])} … exited with {code}:\n{tail}{where}")


def require(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        package = APT_PACKAGES.get(name, name)
        raise ToolMissing(
            f"{name} is not installed: apt-get install -y {package} "
            f"(`make images` and `make test` install what they need when it is missing)"
        )
    return found


def _module_runs(python: str, module: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-m", module, "--version"], capture_output=True, timeout=60, check=False
        )
    except OSError:
        return False
    return done.returncode == 0


def python_module(module: str, hint: str) -> list[str]:
    """``[python, -m, module]`` for the first Python that has it: this interpreter,
    the one its virtualenv was made from, then python3 on PATH. A uv virtualenv has
    neither pip nor uv, and under ``uv run`` (as ``make`` runs us) python3 on PATH
    is that virtualenv's own."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}"
    candidates = [sys.executable, str(base), shutil.which("python3") or "python3"]
    for python in dict.fromkeys(candidates):
        if _module_runs(python, module):
            return [python, "-m", module]
    raise ToolMissing(f"no Python here can run `-m {module}`: {hint}")


def uv() -> list[str]:
    on_path = shutil.which("uv")
    if on_path is not None:
        return [on_path]
    return python_module("uv", "python3 -m pip install 'uv>=0.9' (`make setup` does)")


def uv_export(root: Path, package: str | None = None) -> str:
    """The locked third-party pins (``name==version`` lines, no hashes, no workspace
    members, no dev dependencies) of one workspace package, or of all of them."""
    scope = ["--package", package] if package else ["--all-packages"]
    argv = [*uv(), "export", "--frozen", "--no-hashes", "--no-dev", "--no-emit-workspace"]
    return output([*argv, "--no-header", "--no-annotate", *scope], cwd=root)


def pip() -> list[str]:
    return python_module("pip", "apt-get install -y python3-pip")


def buildah(*args: str) -> list[str]:
    """A buildah command line. buildah 1.28 reads no ``STORAGE_DRIVER`` variable
    itself, so one set in the environment is passed on as ``--storage-driver``."""
    driver = os.environ.get("STORAGE_DRIVER")
    storage = ["--storage-driver", driver] if driver else []
    return [require("buildah"), *storage, *args]


def run(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 3600,
) -> str:
    """Run to completion; stdout and stderr together are returned (and appended to
    ``log``). A non-zero exit raises :class:`CommandFailed` with the last lines."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s") from exc
    output = done.stdout.decode(errors="replace")
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{output}\n")
    if done.returncode != 0:
        raise CommandFailed(argv, done.returncode, output, log)
    return output


def output(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 600) -> str:
    """stdout alone (stderr is kept for the error), for commands whose answer is read."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stderr.decode(errors="replace"))
    return done.stdout.decode(errors="replace")
