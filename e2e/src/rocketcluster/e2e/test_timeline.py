"""What a test timeline (``ROCKETCLUSTER_TEST_TIMELINE``, written by
:mod:`rocketcluster.e2e.test_order`) says: per worker, when it started and finished,
how long it was busy and how much CPU it used; then the units that took longest and
those that used the most CPU. Tells whether the parallel step waits on one worker (a
critical path to split) or on the cores (work to cut: the CPU list says where).

    python -m rocketcluster.e2e.test_timeline /tmp/timeline.txt [--top 25]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rocketcluster.e2e.test_order import unit_of


@dataclass(frozen=True)
class Run:
    worker: str
    start: float
    end: float
    nodeid: str
    cpu: float | None = None  # seconds; None in files written before it was recorded


def parse(text: str) -> list[Run]:
    runs = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split(" ", 3)
        if len(parts) != 4:
            raise ValueError(
                f"line {number}: want '<worker> <start> <end> [cpu=<s>] <nodeid>': {line!r}"
            )
        cpu, nodeid = None, parts[3]
        if nodeid.startswith("cpu="):
            field, _, nodeid = nodeid.partition(" ")
            cpu = float(field.removeprefix("cpu="))
        runs.append(Run(parts[0], float(parts[1]), float(parts[2]), nodeid, cpu))
    return runs


# A pause this long between one test's end and the next start: another ``make test``
# appended to the same file (the parallel and alone steps of one follow each other).
SUITE_GAP_S = 600.0


def last_suite(runs: list[Run]) -> tuple[list[Run], int]:
    """The tests of the last suite run in the file, and how many earlier ones it holds
    (the hook appends, so a file kept between runs holds all of them)."""
    ordered = sorted(runs, key=lambda r: r.start)
    begins, ended = 0, float("-inf")
    earlier = 0
    for index, r in enumerate(ordered):
        if index and r.start > ended + SUITE_GAP_S:
            begins, earlier = index, earlier + 1
        ended = max(ended, r.end)
    return ordered[begins:], earlier


def summary(runs: list[Run], top: int = 25) -> list[str]:
    """Readable lines: the workers' spans, then the ``top`` longest units."""
    if not runs:
        return ["no tests in the timeline"]
    t0 = min(r.start for r in runs)
    lines = []
    workers: dict[str, list[Run]] = {}
    for r in runs:
        workers.setdefault(r.worker, []).append(r)
    for worker, mine in sorted(workers.items()):
        busy = sum(r.end - r.start for r in mine)
        first, last = min(r.start for r in mine) - t0, max(r.end for r in mine) - t0
        cpu = _cpu(mine)
        lines.append(
            f"{worker}: {len(mine)} tests, {first:.0f}s -> {last:.0f}s, busy {busy:.0f}s"
            + (f", cpu {cpu:.0f}s" if cpu is not None else "")
        )
    units: dict[str, list[Run]] = {}
    for r in runs:
        units.setdefault(unit_of(r.nodeid), []).append(r)
    spans = sorted(
        (
            (max(r.end for r in mine) - min(r.start for r in mine), unit, mine)
            for unit, mine in units.items()
        ),
        reverse=True,
    )
    lines.append(f"longest {min(top, len(spans))} of {len(spans)} units (span, worker, from):")
    for span, unit, mine in spans[:top]:
        start = min(r.start for r in mine) - t0
        lines.append(f"  {span:6.0f}s  {mine[0].worker:5}  @{start:.0f}s  {unit}")
    used = sorted(
        ((cpu, unit) for unit, mine in units.items() if (cpu := _cpu(mine)) is not None),
        reverse=True,
    )
    if used:
        lines.append(f"most CPU, {min(top, len(used))} of {len(used)} units (seconds):")
        lines += [f"  {cpu:6.0f}s  {unit}" for cpu, unit in used[:top]]
    return lines


def _cpu(runs: list[Run]) -> float | None:
    known = [r.cpu for r in runs if r.cpu is not None]
    return sum(known) if known else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    try:
        runs = parse(args.timeline.read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read the timeline {args.timeline}: {exc}", file=sys.stderr)
        return 2
    runs, earlier = last_suite(runs)
    if earlier:
        print(
            f"the last of {earlier + 1} suite runs in the file (each pause over "
            f"{SUITE_GAP_S:.0f} s starts one):"
        )
    for line in summary(runs, args.top):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
