"""Every command the README tells a newcomer to type works as typed.

The rule, by fence language:

- ```sh blocks are commands for this machine after `make demo` (or `make setup`):
  this test runs every one of them, in README order, each as typed, from a fresh
  working directory (``.venv`` linked to the repository's, ``examples/`` copied) with
  no virtualenv on PATH — so ``rocketctl`` must be written ``.venv/bin/rocketctl``.
- ```console (and ```text, ```yaml, ...) blocks are shown, not run: commands for
  another place (``kubectl``, ``helm``, a real cluster) or too long for a test
  (``make test``).
- ```bash, ```shell and unlabelled fences are refused: say which of the two is meant.

Inline commands in the prose are checked too: ``rocketctl …`` must be written
``.venv/bin/rocketctl …`` and name a real subcommand, ``make X`` a real target, and
``uv …`` (not on PATH on a fresh machine) ``python3 -m uv …``.

Whatever the commands start, the test stops by pid (``LocalRuntime.down``) and
removes its working directory, even when a command fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketcluster.ctl.local.runtime import STATE_FILE, LocalRuntime

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
RUN = "sh"
REFUSED = frozenset({"", "bash", "shell", "zsh", "shell-session"})
FENCE = re.compile(r"^```(?P<info>[^`\s]*)\s*$")
VENV_ROCKETCTL = ".venv/bin/rocketctl"


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    lines: list[tuple[int, str]]  # (line number, text)


@dataclass(frozen=True)
class Command:
    line: int
    text: str


def fenced_blocks(markdown: str) -> list[Block]:
    """The fenced code blocks of ``markdown``, with their language and line numbers."""
    blocks: list[Block] = []
    opened: tuple[int, str] | None = None
    body: list[tuple[int, str]] = []
    for number, raw in enumerate(markdown.splitlines(), start=1):
        fence = FENCE.match(raw)
        if opened is None:
            if fence:
                opened, body = (number, fence.group("info").lower()), []
        elif raw.strip() == "```":
            blocks.append(Block(opened[0], opened[1], body))
            opened = None
        else:
            body.append((number, raw))
    if opened is not None:
        raise ValueError(f"README.md:{opened[0]}: a fence that is never closed")
    return blocks


def commands(block: Block) -> list[Command]:
    """One command per line (a trailing backslash continues it); blank lines and
    comment lines are not commands."""
    found: list[Command] = []
    pending: tuple[int, str] | None = None
    for number, raw in block.lines:
        start, text = (number, raw.rstrip()) if pending is None else pending
        if pending is not None:
            text = f"{text} {raw.strip()}"
            pending = None
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        if text.strip() and not text.lstrip().startswith("#"):
            found.append(Command(start, text.strip()))
    if pending is not None:
        found.append(Command(*pending))
    return found


def inline_spans(markdown: str) -> list[tuple[int, str]]:
    """Inline code spans outside fenced blocks (a span may wrap a line), with the line
    they start on."""
    outside = []
    in_fence = False
    for number, raw in enumerate(markdown.splitlines(), start=1):
        if raw.startswith("```"):
            in_fence = not in_fence
            outside.append((number, ""))
            continue
        outside.append((number, "" if in_fence else raw))
    text = "\n".join(line for _, line in outside)
    spans = []
    for match in re.finditer(r"`([^`]+)`", text):
        line = text.count("\n", 0, match.start()) + 1
        spans.append((line, " ".join(match.group(1).split())))
    return spans


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", text, re.MULTILINE)}


def fresh_env() -> dict[str, str]:
    """This machine's environment as a newcomer's shell has it: no virtualenv active,
    the repository's ``.venv/bin`` not on PATH."""
    venv_bins = {str(Path(sys.executable).parent), str(REPO / ".venv" / "bin")}
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p not in venv_bins
    )
    return env


def _stop_everything_under(root: Path) -> list[str]:
    """Stop, by pid, every cluster a state file under ``root`` records: the names of
    processes that were still running."""
    left: list[str] = []
    for directory, _, files in os.walk(root):  # does not follow the .venv link
        if STATE_FILE in files:
            runtime = LocalRuntime(Path(directory))
            left += [p["name"] for p in runtime.running()]
            runtime.down()
    return left


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A working directory shaped like the repository for the README's commands."""
    work = Path(tempfile.mkdtemp(prefix="readme-"))
    try:
        (work / ".venv").symlink_to(REPO / ".venv")
        shutil.copytree(REPO / "examples", work / "examples")
        yield work
    finally:
        try:
            _stop_everything_under(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


README_TEXT = README.read_text()


def test_every_fence_says_whether_it_runs() -> None:
    wrong = [b for b in fenced_blocks(README_TEXT) if b.language in REFUSED]
    assert not wrong, "\n".join(
        f"README.md:{b.line}: a ```{b.language or '(no language)'} block - write ```sh "
        f"for commands this machine runs after `make demo` (tests run them), or ```console "
        f"for commands shown only (kubectl, helm, another machine)"
        for b in wrong
    )


def test_the_readme_has_commands_to_run() -> None:
    runnable = [c for b in fenced_blocks(README_TEXT) if b.language == RUN for c in commands(b)]
    assert len(runnable) >= 3, "README.md lost its ```sh commands"


def test_the_readme_commands_work_as_typed(checkout: Path) -> None:
    env = fresh_env()
    run = [c for b in fenced_blocks(README_TEXT) if b.language == RUN for c in commands(b)]
    for command in run:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command.text],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (
            f"README.md:{command.line}: `{command.text}` exited {done.returncode}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    left = _stop_everything_under(checkout)
    assert not left, f"the README's commands leave processes running: {', '.join(left)}"


def _help_command(span: str) -> list[str]:
    """``.venv/bin/rocketctl demo standalone --count 3`` -> the words up to the first
    option or argument that is not a subcommand, then ``--help``."""
    words: list[str] = []
    for word in span.split():
        if word.startswith("-") or ("/" in word and words) or word in ("|", ">"):
            break
        words.append(word)
    return [*words, "--help"]


def test_inline_commands_are_written_as_they_run(checkout: Path) -> None:
    targets = make_targets()
    problems = []
    to_check: list[tuple[int, str]] = []
    for line, span in inline_spans(README_TEXT):
        first = span.split()[0] if span.split() else ""
        if first == "rocketctl" and " " in span:
            problems.append(
                f"README.md:{line}: `{span}` - rocketctl is not on PATH on a fresh machine; "
                f"write `{VENV_ROCKETCTL} {span.split(' ', 1)[1]}`"
            )
        elif first == VENV_ROCKETCTL:
            to_check.append((line, span))
        elif first == "make" and len(span.split()) > 1:
            target = span.split()[1]
            if "=" not in target and target not in targets:
                problems.append(f"README.md:{line}: `{span}` - no target {target!r} in Makefile")
        elif first == "uv" and " " in span:
            problems.append(
                f"README.md:{line}: `{span}` - uv is not on PATH on a fresh machine; "
                f"write `python3 -m {span}`"
            )
    # One run per distinct command: several spans name the same subcommand.
    lines_of: dict[tuple[str, ...], list[int]] = {}
    for line, span in to_check:
        lines_of.setdefault(tuple(_help_command(span)), []).append(line)
    for argv, lines in lines_of.items():
        done = subprocess.run(
            argv,
            cwd=checkout,
            env=fresh_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            where = ", ".join(f"README.md:{line}" for line in lines)
            problems.append(f"{where}: `{' '.join(argv)}` failed: {done.stderr.strip()}")
    assert not problems, "\n".join(problems)


# -- the parser itself ------------------------------------------------------------------


def test_blocks_and_commands_are_read_as_written() -> None:
    markdown = (
        "text `.venv/bin/rocketctl local\nup`\n"
        "```sh\n"
        "echo one   # a comment\n"
        "# only a comment\n"
        "\n"
        "echo two \\\n"
        "  three\n"
        "```\n"
        "```console\n"
        "kubectl get pods\n"
        "```\n"
    )
    blocks = fenced_blocks(markdown)
    assert [(b.line, b.language) for b in blocks] == [(3, "sh"), (10, "console")]
    assert commands(blocks[0]) == [
        Command(4, "echo one   # a comment"),
        Command(7, "echo two three"),
    ]
    assert inline_spans(markdown) == [(1, ".venv/bin/rocketctl local up")]
    assert _help_command(".venv/bin/rocketctl render -f examples/cluster.yaml") == [
        ".venv/bin/rocketctl",
        "render",
        "--help",
    ]
    with pytest.raises(ValueError, match="never closed"):
        fenced_blocks("```sh\necho\n")
