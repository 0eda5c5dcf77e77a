"""Loopback addresses for local processes: each process gets its own 127.0.x.y, so
every one listens on the standard ports (DESIGN §3) as it would in a pod.

Several local clusters may start at once on one host (test sessions, xdist workers,
a demo beside a benchmark). An address is free when its ports bind *now*, but the
processes that will bind them start a moment later: two allocators probing in that
window would both pick it. So an allocator also *claims* what it picks — an
``flock`` on a per-address file that the kernel releases when the claim is closed or
its process ends, however it ends — and skips what another has claimed. The caller
holds the claim until its processes listen; from then on the ports themselves say
the address is taken — while its processes run. A killed process frees its ports
until it is started again, and the next allocator would take the address in that
gap (allocators scan from the same low addresses, so a freed one is picked first):
the cluster's clients would then reach a stranger. So a running cluster also
*leases* its addresses: ``HOST.owner`` names the cluster's state file, and an
allocator skips a host whose owner file names a state file that still exists (the
runtime removes both at ``down``; a deleted cluster directory frees its leases).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CLAIMS_DIRECTORY = Path(tempfile.gettempdir()) / "rocketcluster-loopback-claims"


def bindable(host: str, port: int) -> bool:
    """Whether ``host:port`` (IPv4 or IPv6) can be listened on now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def candidates(start: int = 1) -> Iterator[str]:
    for x in range(start, 255):
        for y in range(1, 255):
            yield f"127.0.{x}.{y}"


@dataclass
class Claim:
    """Addresses picked for one cluster, each held under an ``flock`` until
    :meth:`release` (or the end of the process)."""

    hosts: list[str]
    descriptors: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        while self.descriptors:
            os.close(self.descriptors.pop())

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _try_claim(directory: Path, host: str) -> int | None:
    """An open descriptor holding ``host``'s claim, or None when another holds it."""
    try:
        fd = os.open(directory / f"{host}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def lease(hosts: Iterable[str], owner: Path, directory: Path = CLAIMS_DIRECTORY) -> None:
    """Keep ``hosts`` from every other allocator for as long as ``owner`` exists."""
    for host in hosts:
        path = directory / f"{host}.owner"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(str(owner))
        with contextlib.suppress(OSError):  # shared: the next user may replace it
            tmp.chmod(0o666)
        os.replace(tmp, path)


def end_lease(hosts: Iterable[str], owner: Path, directory: Path = CLAIMS_DIRECTORY) -> None:
    """Give back the leases ``owner`` holds on ``hosts`` (another's are left alone)."""
    for host in hosts:
        path = directory / f"{host}.owner"
        with contextlib.suppress(OSError):
            if path.read_text() == str(owner):
                path.unlink()


def _leased(directory: Path, host: str) -> bool:
    try:
        owner = (directory / f"{host}.owner").read_text()
    except OSError:
        return False
    return bool(owner) and Path(owner).exists()


def claim(
    count: int,
    ports: Iterable[int],
    taken: set[str],
    start: int = 1,
    directory: Path = CLAIMS_DIRECTORY,
) -> Claim:
    """``count`` loopback addresses on which all ``ports`` are free now and which no
    other allocator on this host holds or leases; release the claim once the
    processes given them listen (and :func:`lease` them first)."""
    wanted = list(ports)
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user of the host
        directory.chmod(0o1777)
    held = Claim([])
    try:
        for host in candidates(start):
            if host in taken or _leased(directory, host):
                continue
            fd = _try_claim(directory, host)
            if fd is None:
                continue
            if not all(bindable(host, p) for p in wanted):
                os.close(fd)
                continue
            held.hosts.append(host)
            held.descriptors.append(fd)
            if len(held.hosts) == count:
                return held
    except BaseException:
        held.release()
        raise
    held.release()
    raise RuntimeError(f"no free loopback address for ports {wanted}")
