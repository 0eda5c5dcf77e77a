"""Failpoints: named places in the orchestration where a test can make the operator
die, to prove it resumes from what it wrote to the API server and not from memory.

Inert unless ``ROCKETCLUSTER_FAILPOINT_DIR`` is set (never in the chart). A point
fires when its name is a line of ``DIR/armed`` and ``DIR/fired/<name>`` can still be
created: once, across processes and operator replicas, so a test arms the points of a
roll one after another and each kills exactly one operator. Dying is ``os._exit``:
no cleanup, no lease release, as a SIGKILL or a node failure would end it.

Points (``<kind>`` is a step kind's value, e.g. Switchover, DeletePod):
``before:<kind>`` — the action's intent is written, the action not taken;
``during:Switchover`` — the elect request is sent, its answer not read;
``after:<kind>`` — the action taken, its Done not written;
``after:RemoveGroupObject`` — one of a removed group's objects deleted.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

ENV_DIR = "ROCKETCLUSTER_FAILPOINT_DIR"
EXIT_STATUS = 86

log = logging.getLogger(__name__)


def armed_directory() -> Path | None:
    value = os.environ.get(ENV_DIR)
    return Path(value) if value else None


def hit(name: str) -> None:
    """Die here if the point ``name`` is armed and has not fired yet."""
    directory = armed_directory()
    if directory is None:
        return
    try:
        armed = (directory / "armed").read_text().split()
    except OSError:
        return
    if name not in armed:
        return
    fired = directory / "fired"
    fired.mkdir(exist_ok=True)
    try:
        fd = os.open(fired / name.replace(":", "-"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    log.critical("failpoint %s: the operator dies here (pid %d)", name, os.getpid())
    logging.shutdown()
    os._exit(EXIT_STATUS)


__all__ = ["ENV_DIR", "EXIT_STATUS", "armed_directory", "hit"]
