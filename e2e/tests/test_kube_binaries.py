"""kubectl and helm for the tests: checked (run) once per process and directory, as
``harness.kubectl()`` asks for them on every call; a failure is never remembered."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.e2e.kube import binaries
from rocketcluster.e2e.kube.binaries import BinariesUnavailable, ensure_binaries


def test_the_binaries_are_run_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("kubectl", "helm"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    runs: list[str] = []

    def works(path: Path, name: str) -> bool:
        runs.append(name)
        return True

    monkeypatch.setattr(binaries, "_works", works)
    monkeypatch.setattr(binaries, "_checked", {})
    first = ensure_binaries(tmp_path)
    assert first.kubectl == tmp_path / "kubectl" and sorted(runs) == ["helm", "kubectl"]
    assert ensure_binaries(tmp_path) == first and len(runs) == 2
    (tmp_path / "helm").unlink()  # gone since: checked again
    ensure_binaries(tmp_path)
    assert len(runs) == 4


def test_a_failure_says_why_on_every_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(into: Path) -> Path:
        raise BinariesUnavailable("could not download (offline?)")

    monkeypatch.setattr(binaries, "_works", lambda path, name: False)
    monkeypatch.setattr(binaries, "_download", offline)
    monkeypatch.setattr(binaries, "_checked", {})
    for _ in range(2):
        with pytest.raises(BinariesUnavailable, match="offline"):
            ensure_binaries(tmp_path)
