"""The documentation lives in the repository and names only what exists: the README
points to docs/ and nowhere outside the repository, and every repository path, `make`
target and `rocketctl` command the docs name in backticks (or link to) is real.

A path is checked when its first part is an entry of the repository's root (so
`broker/src/...`, `examples/cluster.yaml`, `Makefile`); API routes (`/v1/...`),
addresses and dotted module names are not paths here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketcluster.ctl.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
CHECKED = [REPO / "README.md", *DOCS]
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _root_entries() -> set[str]:
    """The repository's own top-level names: what git tracks. Build output that a
    command makes (dist/ by `make chart` and `make images`) is named in the docs as
    what that command writes, and is there only on a machine that ran it."""
    try:
        tracked = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return {p.name for p in REPO.iterdir() if p.name != ".git"}
    return {path.split("/", 1)[0] for path in tracked.split("\0") if path}


ROOT_ENTRIES = _root_entries()


def _outside_fences(text: str) -> str:
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def _repo_path(span: str) -> str | None:
    """``span`` as a repository path to check, or None when it is not one."""
    span = span.strip().rstrip(".,:;")
    if " " in span or span.startswith(("/", "http", "-")) or "<" in span or "*" in span:
        return None
    first = span.split("/", 1)[0]
    if first not in ROOT_ENTRIES or first in (".venv",):
        return None
    return span.split("#", 1)[0].split("::", 1)[0]


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", text, re.MULTILINE)}


def _rocketctl_words(span: str) -> list[str] | None:
    words = span.split()
    if not words or words[0] not in ("rocketctl", ".venv/bin/rocketctl"):
        return None
    out = []
    for word in words[1:]:
        if word.startswith("-") or "/" in word or not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        out.append(word)
    return out


def test_the_architecture_is_in_the_repository_and_the_readme_points_there() -> None:
    assert (REPO / "docs" / "architecture.md").is_file()
    assert (REPO / "docs" / "README.md").is_file()
    readme = (REPO / "README.md").read_text()
    head = readme[: readme.index("## ")]  # the pointer a newcomer reads first
    assert "docs/architecture.md" in head and "docs/README.md" in head, head
    for doc in CHECKED:
        assert "../shared" not in doc.read_text(), f"{doc.name} points outside the repository"
    index = (REPO / "docs" / "README.md").read_text()
    missing = [d.name for d in DOCS if f"docs/{d.name}" not in index]
    assert not missing, f"docs/README.md does not index {missing}"


@pytest.mark.parametrize("doc", CHECKED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_and_target_named_exists(doc: Path) -> None:
    text = _outside_fences(doc.read_text())
    targets = _make_targets()
    problems = []
    for span in SPAN.findall(text):
        path = _repo_path(span)
        if path is not None and not (REPO / path).exists():
            problems.append(f"`{span}`: no such path")
        words = span.split()
        if len(words) >= 2 and words[0] == "make":
            target = words[1]
            if "=" not in target and target not in targets:
                problems.append(f"`{span}`: no target {target!r} in the Makefile")
    for link in LINK.findall(text):
        if link.startswith(("http", "#", "mailto:")):
            continue
        target = (doc.parent / link.split("#", 1)[0]).resolve()
        if not target.exists():
            problems.append(f"link ({link}): no such file")
    assert not problems, f"{doc.relative_to(REPO)}:\n" + "\n".join(problems)


def test_every_rocketctl_command_named_exists() -> None:
    commands: set[tuple[str, ...]] = set()
    for doc in DOCS:
        for span in SPAN.findall(_outside_fences(doc.read_text())):
            named = _rocketctl_words(span)
            if named:
                commands.add(tuple(named))
    assert commands, "the docs name no rocketctl command at all?"
    failed = []
    runner = CliRunner()
    for command in sorted(commands):
        done = runner.invoke(main, [*command, "--help"])
        if done.exit_code != 0:
            failed.append(f"rocketctl {' '.join(command)}: {done.output.strip()[-300:]}")
    assert not failed, "\n".join(failed)


def test_the_path_rule_itself() -> None:
    assert _repo_path("broker/src/rocketcluster/broker/messaging/pop.py") is not None
    assert _repo_path("examples/cluster.yaml.") == "examples/cluster.yaml"
    assert _repo_path("Makefile") == "Makefile"
    for not_a_path in ("/v1/groups/<group>/offsets", "10.77.0.0/24", "x-rc-borrowed", "a b/c"):
        assert _repo_path(not_a_path) is None, not_a_path
    assert _rocketctl_words(".venv/bin/rocketctl local up -f examples/x.yaml") == ["local", "up"]
