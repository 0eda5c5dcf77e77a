"""What one health report run leaves for the next, so that the next reads only the
snapshots taken since (issue 31: a report's cost follows what is new, not the length of
the history).

``OUT/history/state/`` holds one run's conclusions, replaced whole at the end of a
run: ``meta.json`` (the settings the state depends on and, per broker group, the newest
snapshot read: the high-water mark), ``lag_tails/`` (each queue's last points and since
when its offset has held), ``lag_parts/`` (per consumer group and broker group, the
plot's value in each bucket of the window), ``events/`` (the controllers' history of
the window), ``segment_latest/`` and ``queue_latest/`` (each broker group's newest
snapshot of those tables). Its size follows the cluster's size (queues, groups), not
the history's length.

A run that fails before its commit leaves the previous state in place
(``state.next/`` is dropped by the next run). A state written with other settings
(window points, plot bucket, jobs, version) is not used: that run reads the whole
window again, as the first run does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rocketcluster.jobs import tables
from rocketcluster.jobs.lag import LAG_TAILS, TAIL_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

VERSION: Final = 1
LAG_PARTS: Final = "lag_parts"
SEGMENT_LATEST: Final = "segment_latest"
QUEUE_LATEST: Final = "queue_latest"
DAY_COLUMN: Final = "day"  # results that span days are partitioned by it
PARTS_SCHEMA: Final = (
    "consumer_group string, broker_group string, time long, committed_offset long, "
    "max_offset long, lag_messages long, lag_ms long, inflight long, retry long"
)


@dataclass(frozen=True)
class StateMeta:
    """What a state depends on and how far it has read."""

    run: str
    window_points: int
    bucket_ms: int
    cluster: str
    jobs: tuple[str, ...]
    # Per broker group: the newest snapshot time whose rows the state holds.
    high_water: dict[str, int] = field(default_factory=dict)
    # The oldest snapshot or event time ever read: where a young cluster's report starts.
    first_seen: int | None = None
    version: int = VERSION

    def compatible(self, other: StateMeta) -> bool:
        """Whether a run with ``other``'s settings can continue this state."""
        mine = (self.version, self.window_points, self.bucket_ms, self.cluster, self.jobs)
        return mine == (VERSION, other.window_points, other.bucket_ms, other.cluster, other.jobs)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> StateMeta:
        return cls(
            run=str(raw["run"]),
            window_points=int(raw["window_points"]),
            bucket_ms=int(raw["bucket_ms"]),
            cluster=str(raw.get("cluster", "")),
            jobs=tuple(str(j) for j in raw.get("jobs") or ()),
            first_seen=None if raw.get("first_seen") is None else int(raw["first_seen"]),
            high_water={str(k): int(v) for k, v in dict(raw.get("high_water") or {}).items()},
            version=int(raw.get("version", 0)),
        )


def merge_high_water(
    prior: Mapping[str, int], read: Mapping[str, int], held_back: set[str]
) -> dict[str, int]:
    """The new marks: the newest time read per group, never behind the prior mark; a
    group some of whose snapshots could not be read keeps its prior mark (its rows are
    read again next time, and merged, as every reader of the state merges duplicates)."""
    out = dict(prior)
    for group, time_ms in read.items():
        if group in held_back:
            continue
        out[group] = max(time_ms, out.get(group, time_ms))
    return out


@dataclass
class History:
    """The history directory of one report output directory."""

    root: Path

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def next_dir(self) -> Path:
        return self.root / "state.next"

    def meta(self) -> StateMeta | None:
        try:
            raw = json.loads((self.state_dir / "meta.json").read_text())
            return StateMeta.parse(raw)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def prepare(self) -> StateMeta | None:
        """Before a run: forget what a failed run left, and the committed state's meta."""
        shutil.rmtree(self.next_dir, ignore_errors=True)
        return self.meta()

    def read_state(self, spark: SparkSession, table: str) -> DataFrame:
        return spark.read.schema(_STATE_SCHEMAS[table]).parquet(str(self.state_dir / table))

    def read_next(self, spark: SparkSession, table: str) -> DataFrame:
        """A table this run wrote to the state it will commit."""
        return spark.read.schema(_STATE_SCHEMAS[table]).parquet(str(self.next_path(table)))

    def next_path(self, table: str) -> Path:
        return self.next_dir / table

    def commit(self, meta: StateMeta) -> None:
        """Make the written ``state.next`` the state."""
        (self.next_dir / "meta.json").write_text(json.dumps(asdict(meta), indent=2) + "\n")
        old = self.root / "state.old"
        shutil.rmtree(old, ignore_errors=True)
        if self.state_dir.exists():
            self.state_dir.rename(old)
        self.next_dir.rename(self.state_dir)
        shutil.rmtree(old, ignore_errors=True)


_STATE_SCHEMAS: Final = {
    LAG_TAILS: TAIL_SCHEMA,
    LAG_PARTS: PARTS_SCHEMA,
    tables.EVENTS: tables.INPUT_SCHEMAS[tables.EVENTS],
    SEGMENT_LATEST: tables.INPUT_SCHEMAS[tables.SEGMENT_STATS],
    QUEUE_LATEST: tables.INPUT_SCHEMAS[tables.QUEUE_STATS],
}
