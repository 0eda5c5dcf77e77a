"""The facts of the workspace an image is built from: its root, its one version
(every member's), the git commit, the declared licence."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from rocketcluster.e2e.images.plan import (
    Workspace,
    WorkspaceError,
    license_expression,
    workspace_version,
)


def _toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def find_root(start: Path | None = None) -> Path:
    """The nearest directory, from ``start`` (default: here) upwards, whose
    pyproject.toml declares a uv workspace."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and "workspace" in (_toml(pyproject).get("tool") or {}).get(
            "uv", {}
        ):
            return directory
    raise WorkspaceError(f"no uv workspace at or above {here}: run from the rocketcluster checkout")


def member_versions(root: Path) -> dict[str, str]:
    members = _toml(root / "pyproject.toml")["tool"]["uv"]["workspace"]["members"]
    versions = {}
    for member in members:
        project = _toml(root / member / "pyproject.toml")["project"]
        versions[str(project["name"])] = str(project["version"])
    return versions


def git_revision(root: Path) -> str:
    """The commit, with ``-dirty`` when tracked files have changed since (the image
    is then not exactly that commit); "unknown" outside a git checkout."""
    git = shutil.which("git")
    if git is None:
        return "unknown"

    def ask(*args: str) -> str | None:
        done = subprocess.run(
            [git, *args], cwd=root, capture_output=True, text=True, timeout=60, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else None

    commit = ask("rev-parse", "HEAD")
    if not commit:
        return "unknown"
    changed = ask("status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if changed else commit


def read_workspace(root: Path) -> Workspace:
    return Workspace(
        root=root,
        version=workspace_version(member_versions(root)),
        revision=git_revision(root),
        licenses=license_expression(_toml(root / "pyproject.toml").get("project") or {}),
    )
