"""The realiser's ``--host-source IMAGE=DIR``: what it accepts and refuses (the upgrade
test, ``e2e/k8s/test_upgrade_roll.py``, runs a previous release through it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rocketcluster.e2e.kube.realiser import Realiser, host_source


def test_an_image_and_a_directory(tmp_path: Path) -> None:
    assert host_source(f"reg/rocketcluster-broker:0.9={tmp_path}") == (
        "reg/rocketcluster-broker:0.9",
        tmp_path.resolve(),
    )


@pytest.mark.parametrize("value", ["no-equals", "=dir", "image=", "image=/no/such/dir"])
def test_anything_else_is_refused_saying_what_to_give(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"IMAGE=DIR|not a directory"):
        host_source(value)


def test_host_sources_are_for_host_processes_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host processes only"):
        Realiser(
            "http://127.0.0.1:1",
            tmp_path,
            pod_runtime="image",
            host_sources={"x": tmp_path},
        )
