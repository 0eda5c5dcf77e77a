"""The local runtime's processes run inside an image: ``LocalRuntime.up(…,
argv_prefix=in_image(container, directory))``.

The runtime plans, writes the configs, allocates loopback addresses, waits for
``/readyz`` and stops by PID as it always does; only the command changes. It starts
``<prefix> <python> -m <module> --config <path>``: the prefix is ``buildah run`` of a
working container (host network, the runtime's config directory read-only and its
data directory read-write, mounted at the same paths), and inside it a shell drops
the host's interpreter and module and execs the image's own entry point with the
rest (``--config <path>``). The PID the runtime records is ``buildah run``'s; a
signal to it ends the process inside (buildah kills it), and the command line still
names the config file, which is how the runtime recognises its processes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rocketcluster.ctl.local.plan import ProcessPlan
from rocketcluster.e2e.images.buildah import run_argv

# The console script each role's image starts (what the operator's pods run).
ENTRY_POINTS = {"broker": "rocketcluster-broker", "controller": "rocketcluster-controller"}
# `<python> -m <module>` precede the arguments the entry point takes.
DROPPED = 3


class NotInImage(ValueError):
    pass


def in_image(container: str, directory: Path) -> Callable[[ProcessPlan], list[str]]:
    """An ``argv_prefix`` for :meth:`LocalRuntime.up` that runs each process in
    ``container`` (a working container of the role's image)."""
    root = directory.resolve()

    def prefix(plan: ProcessPlan) -> list[str]:
        entry = ENTRY_POINTS.get(plan.role)
        if entry is None:
            raise NotInImage(
                f"{plan.name}: no image runs the local runtime's {plan.role!r} process "
                f"(images run {', '.join(ENTRY_POINTS)})"
            )
        volumes = [
            (str(root / "config"), str(root / "config"), True),
            (str(root / "data"), str(root / "data"), False),
        ]
        script = f'shift {DROPPED}; exec {entry} "$@"'
        return run_argv(container, ["/bin/sh", "-c", script, "sh"], volumes=volumes)

    return prefix
