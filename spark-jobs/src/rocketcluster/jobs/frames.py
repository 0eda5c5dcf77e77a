"""What the three jobs share: checking inputs, typing result frames after the contract
in ``tables``, the words and numbers the reasons are written with, and spreading keys
over a few pandas calls in Spark.

Why buckets and not one ``applyInPandas`` call per key: a Python call with a handful
of pandas operations costs about a millisecond, so 100,000 queues would take well over a minute;
the cores are vectorised over many keys instead, and Spark hands each of them a bucket
of whole keys (a hash of the key modulo a few times the shuffle partitions).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from rocketcluster.jobs import tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

BUCKET_COLUMN = "_bucket"


class InputError(ValueError):
    """An input table a job cannot read: wrong columns or impossible parameters."""


def ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """(name, type) of each field of a DDL schema string, in order."""
    fields = []
    depth = 0
    field = ""
    for ch in ddl + ",":
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            name, _, kind = field.strip().partition(" ")
            fields.append((name, kind.strip()))
            field = ""
        else:
            field += ch
    return fields


def require_columns(present: Iterable[str], table: str, job: str) -> None:
    """Refuse an input that lacks a column the contract in ``tables`` promises."""
    wanted = tables.column_names(tables.INPUT_SCHEMAS[table])
    have = set(present)
    missing = [c for c in wanted if c not in have]
    if missing:
        raise InputError(
            f"the {job} job needs the {table} table with columns {', '.join(wanted)}; "
            f"missing: {', '.join(missing)} (read it with the rocketcluster data source "
            "or from a Parquet snapshot written by it)"
        )


_PANDAS_TYPES = {
    "long": "int64",
    "int": "int64",
    "double": "float64",
    "boolean": "bool",
    "string": "object",
}
_NULLABLE_TYPES = {"long": "Int64", "int": "Int64", "boolean": "boolean", "string": "object"}


def typed(frame: pd.DataFrame, table: str, nullable: Sequence[str] = ()) -> pd.DataFrame:
    """The frame with exactly the columns of result ``table``, in order, with pandas
    dtypes matching its Spark types (``nullable`` integer columns as pandas ``Int64``)."""
    out = {}
    for name, kind in ddl_fields(tables.RESULT_SCHEMAS[table]):
        if name in frame.columns:
            column = frame[name].reset_index(drop=True)
        else:
            column = pd.Series([None] * len(frame), dtype=object)
        dtype = _NULLABLE_TYPES.get(kind) if name in nullable else _PANDAS_TYPES.get(kind)
        column = column.astype(dtype) if dtype else column
        if dtype == "object":  # missing strings as None, not NaN: JSON and Arrow agree
            column = column.where(column.notna(), None)
        out[name] = column
    return pd.DataFrame(out, index=pd.RangeIndex(len(frame)))


def empty(table: str, nullable: Sequence[str] = ()) -> pd.DataFrame:
    names = tables.column_names(tables.RESULT_SCHEMAS[table])
    return typed(pd.DataFrame({n: [] for n in names}), table, nullable)


# -- words and numbers ----------------------------------------------------------------


def count(n: float) -> str:
    """1204 → "1,204"."""
    return f"{int(n):,}"


def duration(ms: float) -> str:
    """A duration the way a person says it: 850ms, 42s, 4m30s, 2h05m, 3d04h."""
    ms = int(ms)
    if ms < 0:
        return "-" + duration(-ms)
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def plural(n: int, word: str) -> str:
    return f"{count(n)} {word}" + ("" if n == 1 else "s")


def jsonable(value: Any) -> Any:
    """numpy scalars and pandas NA as plain JSON values."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


# -- Spark helpers --------------------------------------------------------------------


def spark_columns(frame: DataFrame, table: str, job: str) -> None:
    require_columns(frame.columns, table, job)


def by_key(frame: DataFrame, keys: Sequence[str]) -> DataFrame:
    """``frame`` with a bucket column (a hash of ``keys``, four buckets per shuffle
    partition so that the partitions come out even), hash-partitioned by it. Grouping by
    the bucket then needs no further shuffle, not even after a cache."""
    from pyspark.sql import functions as F

    conf = frame.sparkSession.conf.get("spark.sql.shuffle.partitions") or "4"
    partitions = max(1, int(conf))
    bucket = F.pmod(F.xxhash64(*keys), F.lit(4 * partitions)).alias(BUCKET_COLUMN)
    return frame.select(bucket, "*").repartition(partitions, BUCKET_COLUMN)


def result_columns(table: str) -> list[str]:
    return tables.column_names(tables.RESULT_SCHEMAS[table])
