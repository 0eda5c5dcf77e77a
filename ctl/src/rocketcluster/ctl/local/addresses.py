"""Loopback addresses for local processes: each process gets its own 127.0.x.y, so
every one listens on the standard ports (DESIGN §3) as it would in a pod."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator


def bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def candidates(start: int = 1) -> Iterator[str]:
    for x in range(start, 255):
        for y in range(1, 255):
            yield f"127.0.{x}.{y}"


def allocate(count: int, ports: Iterable[int], taken: set[str], start: int = 1) -> list[str]:
    """``count`` loopback addresses on which all ``ports`` are free now."""
    wanted = list(ports)
    found: list[str] = []
    for host in candidates(start):
        if host in taken:
            continue
        if all(bindable(host, p) for p in wanted):
            found.append(host)
            if len(found) == count:
                return found
    raise RuntimeError(f"no free loopback address for ports {wanted}")
