"""Loopback address claims: two clusters starting at once never pick the same address
(pytest-xdist workers and parallel sessions start local clusters side by side)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.addresses import CLAIMS_DIRECTORY, claim, end_lease, lease
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING

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


def test_a_leased_address_is_skipped_while_its_owner_exists(tmp_path: Path) -> None:
    """A cluster whose process was killed frees that address's ports until the restart:
    its lease keeps the next allocator off it for as long as the cluster is recorded."""
    owner = tmp_path / "cluster.json"
    owner.write_text("{}")
    claims = tmp_path / "claims"
    with claim(1, [PORT], set(), start=234, directory=claims) as mine:
        lease(mine.hosts, owner, directory=claims)
    with claim(1, [PORT], set(), start=234, directory=claims) as other:
        assert other.hosts != mine.hosts
    end_lease(mine.hosts, tmp_path / "another.json", directory=claims)  # not its owner
    with claim(1, [PORT], set(), start=234, directory=claims) as other:
        assert other.hosts != mine.hosts
    owner.unlink()  # the cluster's directory is gone: its lease no longer counts
    with claim(1, [PORT], set(), start=234, directory=claims) as again:
        assert again.hosts == mine.hosts
    owner.write_text("{}")
    end_lease(mine.hosts, owner, directory=claims)
    with claim(1, [PORT], set(), start=234, directory=claims) as again:
        assert again.hosts == mine.hosts


def test_a_local_cluster_leases_its_addresses_until_down(tmp_path: Path) -> None:
    """The runtime leases what it picked once its processes listen, through a kill (the
    gap another cluster's allocator used to fall into), and gives it back at down."""
    runtime = LocalRuntime(tmp_path / "run")
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "leased"},
            "spec": {"controller": {"replicas": 0}, "brokers": {"groups": 1, "replicas": 1}},
        }
    )
    runtime.up(cluster, overrides=FAST_TUNING)
    try:
        state = runtime.state()
        assert state is not None
        (proc,) = [p for p in state["processes"] if p["role"] == "broker"]
        runtime.kill(proc["name"])
        owner = (CLAIMS_DIRECTORY / f"{proc['host']}.owner").read_text()
        assert owner == str(runtime.state_path.resolve())
        with claim(1, [8081], set(), start=int(proc["host"].split(".")[2])) as other:
            assert proc["host"] not in other.hosts
    finally:
        runtime.down()
    assert not (CLAIMS_DIRECTORY / f"{proc['host']}.owner").exists()
