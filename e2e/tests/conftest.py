"""Shared fixtures of the e2e member's own tests: the kube harness binaries."""

from __future__ import annotations

import pytest

from rocketcluster.e2e.kube.binaries import Binaries, BinariesUnavailable, ensure_binaries


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """kubectl and helm, unpacked once; a test that needs them fails loudly when
    they cannot be had (the error says what to do)."""
    try:
        return ensure_binaries()
    except BinariesUnavailable as exc:
        pytest.fail(str(exc))
