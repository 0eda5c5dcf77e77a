"""The ``rocketcluster`` data source: rows, push-down bounds, and a real broker read
through Spark with a time filter pushed down to the stats topic's offsets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.stats import ConsumerStats, QueueStats, StatsSnapshot
from rocketcluster.controller.state import ReplicasState
from rocketcluster.ctl.testing import LocalBroker, local_broker, wait_for
from rocketcluster.ctl.workload import consume, produce
from rocketcluster.jobs import tables
from rocketcluster.jobs.cluster import group_replicas
from rocketcluster.jobs.source import (
    Bounds,
    RocketClusterDataSource,
    SourceOptionError,
    StatsPartition,
    event_row,
    record_batches,
    snapshot_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_bounds_take_time_and_group_filters_and_refuse_the_rest() -> None:
    b = Bounds()
    b = b.narrowed(GreaterThanOrEqual(("time",), 100)) or b
    b = b.narrowed(GreaterThan(("time",), 150)) or b
    b = b.narrowed(LessThan(("time",), 500)) or b
    assert (b.since_ms, b.until_ms) == (151, 499)
    b = b.narrowed(In(("broker_group",), ("g1", "g2"))) or b
    b = b.narrowed(EqualTo(("broker_group",), "g2")) or b
    assert b.groups == frozenset({"g2"})
    assert b.keeps_time(151) and not b.keeps_time(150) and not b.keeps_time(500)
    assert Bounds().narrowed(EqualTo(("topic",), "x")) is None
    assert Bounds().narrowed(EqualTo(("time",), 5)) is None  # equality is Spark's to apply


def test_snapshot_rows_carry_the_snapshot_key() -> None:
    snap = StatsSnapshot(
        time=1000,
        cluster="c",
        broker_group="c-broker-0",
        broker_id=2,
        queues=[QueueStats(topic="t", queue_id=1, min_offset=0, max_offset=9)],
        consumers=[
            ConsumerStats(
                consumer_group="g", topic="t", queue_id=1, committed_offset=4, max_offset=9
            )
        ],
    )
    rows = list(snapshot_rows(snap, tables.CONSUMER_STATS))
    assert rows == [
        {
            "time": 1000, "cluster": "c", "broker_group": "c-broker-0", "broker_id": 2,
            "consumer_group": "g", "topic": "t", "queue_id": 1, "committed_offset": 4,
            "min_offset": 0, "max_offset": 9, "committed_store_time": None, "inflight": 0,
            "retry": 0,
        }
    ]  # fmt: skip
    schema = tables.arrow_schema(tables.INPUT_SCHEMAS[tables.CONSUMER_STATS])
    (batch,) = record_batches(rows, schema)
    assert batch.num_rows == 1 and batch.schema == schema
    queue_rows = list(snapshot_rows(snap, tables.QUEUE_STATS))
    assert set(queue_rows[0]) == set(tables.column_names(tables.INPUT_SCHEMAS[tables.QUEUE_STATS]))


def test_event_rows_read_the_controller_history_shape() -> None:
    """The history the controller's own state machine records (not a hand-made copy of
    its shape: one named the elected master ``newMasterId``, the controller does not)."""
    state = ReplicasState()
    commands: list[dict[str, object]] = [
        {"type": "ApplyBrokerId", "cluster": "c", "group": "g", "brokerId": b,
         "address": f"10.0.0.{b}:10911", "checkCode": f"code-{b}"}
        for b in (1, 2)
    ]  # fmt: skip
    commands.append(
        {"type": "ElectMaster", "group": "g", "masterEpoch": 0, "newMaster": 2,
         "unclean": True, "reason": "master down"}
    )  # fmt: skip
    for index, command in enumerate(commands, start=1):
        assert state.apply(index, command, time_ms=5000 + index).ok
    registration, _, election = (event_row(e) for e in state.history)
    assert election["command"] == "ElectMaster" and election["broker_id"] == 2
    assert election["master_id"] == 2 and election["unclean"] is True
    assert election["sync_state_set"] == [2] and election["reason"] == "master down"
    assert registration["broker_id"] == 1 and registration["unclean"] is False


def test_record_batches_split_and_keep_nulls() -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    batches = list(record_batches(({"a": i, "b": None} for i in range(5)), schema, size=2))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert batches[0].column(1).null_count == 2


def test_arrow_schema_matches_spark(spark: SparkSession) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    for ddl in (*tables.INPUT_SCHEMAS.values(), *tables.RESULT_SCHEMAS.values()):
        spark_schema = cast(StructType, StructType.fromDDL(ddl))
        assert tables.arrow_schema(ddl) == to_arrow_schema(spark_schema), ddl


def test_group_admin_addresses_follow_the_registered_host_master_first() -> None:
    view = {
        "group": "g", "masterId": 2,
        "replicas": {
            "1": "10.0.0.1:8081|10.0.0.1:10912", "2": "broker-1.svc:8081|broker-1.svc:10912",
        },
    }  # fmt: skip
    assert group_replicas(view).admin == ("broker-1.svc:8080", "10.0.0.1:8080")
    assert group_replicas(view, {"g": ["x:1"]}).admin == ("x:1",)
    # Controllers reached over https (spec.security.tls): the brokers are too.
    assert group_replicas(view, scheme="https").admin == (
        "https://broker-1.svc:8080",
        "https://10.0.0.1:8080",
    )


def test_bad_options_say_what_to_give(spark: SparkSession) -> None:
    spark.dataSource.register(RocketClusterDataSource)
    with pytest.raises(Exception, match="choose one of"):
        spark.read.format("rocketcluster").option("table", "nope").load().count()
    with pytest.raises(SourceOptionError, match="controller admin URL"):
        RocketClusterDataSource({"table": "events"}).reader(None)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "src"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "statsIntervalSeconds": 0.3},
                "topics": [{"name": "orders", "queues": 2}],
                "consumerGroups": [{"name": "billing"}],
            },
        }
    )
    directory = tmp_path_factory.mktemp("source")
    with local_broker(cluster, directory) as handle:
        yield handle


def test_a_live_broker_reads_through_spark_with_the_time_filter_pushed(
    spark: SparkSession, broker: LocalBroker
) -> None:
    produce(broker.endpoints, 40, topic="orders")
    consume(broker.endpoints, 10, group="billing", topic="orders")
    with broker.admin() as admin:
        wait_for(lambda: admin.stats_snapshots(0, 1).max_offset >= 10, what="10 snapshots")
    group = broker.admin().broker()["group"]
    spark.dataSource.register(RocketClusterDataSource)

    def frame(table: str):  # type: ignore[no-untyped-def]
        return (
            spark.read.format("rocketcluster")
            .option("table", table)
            .option("brokerAdmin", f'{{"{group}": ["{broker.admin_address}"]}}')
            .load()
        )

    consumers = frame(tables.CONSUMER_STATS).where("consumer_group = 'billing'").toPandas()
    assert set(consumers["topic"]) == {"orders"}
    latest = consumers[consumers["time"] == consumers["time"].max()]
    assert latest["max_offset"].sum() == 40
    assert latest["committed_offset"].sum() >= 10
    queues = frame(tables.QUEUE_STATS).toPandas()
    assert {"orders"} <= set(queues["topic"])
    segments = frame(tables.SEGMENT_STATS).where("topic = 'orders'").toPandas()
    assert segments.groupby("time")["messages"].sum().max() == 40

    middle = int(consumers["time"].quantile(0.5))
    since = frame(tables.CONSUMER_STATS).where(f"time >= {middle}")
    assert since.toPandas()["time"].min() >= middle
    events = frame(tables.EVENTS).toPandas()
    assert events.empty  # no controllers: no event history
    assert time.time() * 1000 - consumers["time"].max() < 60_000


def _partitions(options: dict[str, str]) -> list[StatsPartition]:
    reader = RocketClusterDataSource(options).reader(None)  # type: ignore[arg-type]
    return cast(list[StatsPartition], reader.partitions())


def test_partitions_start_at_the_pushed_time(broker: LocalBroker) -> None:
    """A lower bound on time becomes the first stats offset read: older snapshots are
    never fetched, and the ranges stay within the partition size."""
    from rocketcluster.jobs import source

    group = broker.admin().broker()["group"]
    options = {
        "table": tables.QUEUE_STATS,
        "brokerAdmin": f'{{"{group}": ["{broker.admin_address}"]}}',
    }
    with broker.admin() as admin:  # before the partitions: the broker keeps publishing
        page = admin.stats_snapshots(0, 1)
        first, kept = page.min_offset, page.max_offset
        middle_time = admin.stats_snapshots((first + kept) // 2, 1).snapshots[0].snapshot.time
    everything = _partitions(options)
    assert everything[0].start == first
    assert sum(p.end - p.start for p in everything) >= kept - first
    assert all(p.end - p.start <= source.SNAPSHOTS_PER_PARTITION for p in everything)

    reader = RocketClusterDataSource(options).reader(None)  # type: ignore[arg-type]
    left = list(
        reader.pushFilters([GreaterThanOrEqual(("time",), middle_time), EqualTo(("topic",), "x")])
    )
    assert left == [EqualTo(("topic",), "x")]  # Spark applies what was not pushed
    later = cast(list[StatsPartition], reader.partitions())
    assert first < later[0].start <= (first + kept) // 2


def test_filters_without_a_value_are_left_to_spark() -> None:
    from pyspark.sql.datasource import IsNotNull, Not

    assert Bounds().narrowed(IsNotNull(("time",))) is None
    assert Bounds().narrowed(Not(EqualTo(("broker_group",), "g"))) is None
