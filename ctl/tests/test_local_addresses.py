"""Loopback address claims: two clusters starting at once never pick the same address
(pytest-xdist workers and parallel sessions start local clusters side by side)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from rocketcluster.ctl.local.addresses import claim

PORT = 47311  # an unprivileged port nothing of ours uses


def test_a_held_claim_keeps_its_addresses_from_the_next_allocator(tmp_path: Path) -> None:
    with claim(3, [PORT], set(), start=230, directory=tmp_path) as first:
        second = claim(3, [PORT], set(), start=230, directory=tmp_path)
        with second:
            assert len(set(first.hosts) | set(second.hosts)) == 6
    # Released: the next allocator may have them again.
    with claim(3, [PORT], set(), start=230, directory=tmp_path) as third:
        assert third.hosts == first.hosts


def test_a_claim_held_by_another_process_is_skipped(tmp_path: Path) -> None:
    """The lock is the kernel's: another process holding it counts as taken, and its
    end (however it ends) frees the address."""
    with claim(1, [PORT], set(), start=231, directory=tmp_path) as mine:
        host = mine.hosts[0]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / (host + '.lock'))!r}, os.O_RDONLY | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with claim(1, [PORT], set(), start=231, directory=tmp_path) as other:
            assert other.hosts != [host]
    finally:
        holder.kill()
        holder.wait()
    with claim(1, [PORT], set(), start=231, directory=tmp_path) as again:
        assert again.hosts == [host]


def test_an_address_whose_port_is_bound_is_not_picked(tmp_path: Path) -> None:
    with claim(1, [PORT], set(), start=232, directory=tmp_path) as probe:
        host = probe.hosts[0]
    with socket.socket() as listener:
        listener.bind((host, PORT))
        listener.listen()
        with claim(1, [PORT], set(), start=232, directory=tmp_path) as picked:
            assert picked.hosts != [host]
        with claim(2, [PORT], {"127.0.232.9"}, start=232, directory=tmp_path) as two:
            assert host not in two.hosts


def test_taken_addresses_are_skipped(tmp_path: Path) -> None:
    with claim(2, [PORT], {"127.0.233.1"}, start=233, directory=tmp_path) as picked:
        assert picked.hosts == ["127.0.233.2", "127.0.233.3"]
