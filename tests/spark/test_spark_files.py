"""The sink's data files written by Spark's own Parquet writer (no Python worker) and committed
through pyiceberg: every partition transform Spark can group by, nested columns, an idle batch
that leaves nothing, and the tables that keep pyiceberg's writer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import DataFrame, SparkSession

from spark_app.contract.config import CatalogConfig
from spark_app.contract.sinks import IcebergSink
from spark_app.sinks.iceberg import batch_tags, spark_files
from spark_app.sinks.iceberg.commit import find_batch
from spark_app.sinks.iceberg.writer import IcebergBatchWriter

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 23, 22, 30, tzinfo=UTC)
SCHEMA = (
    "id long, name string, ts timestamp, d date, tags array<string>, attrs map<string,int>, st struct<a:int,b:string>"
)


def rows(n: int, first: int = 0) -> list[tuple[Any, ...]]:
    out = []
    for i in range(first, first + n):
        ts = T0 + timedelta(hours=37 * i, minutes=i)  # crosses hours, days, months and a year's end
        name = None if i % 7 == 0 else f"név-{i % 3}"
        out.append((i, name, ts, ts.date(), [f"t{i}", None], {"k": i}, (i, f"s{i}")))
    return out


def sink_writer(tmp: Path, table: str, partition_by: list[str], **sink_fields: Any) -> IcebergBatchWriter:
    catalog = CatalogConfig(type="sql", uri=f"sqlite:///{tmp}/c.db", warehouse=f"file://{tmp}/wh")
    sink = IcebergSink(kind="iceberg", table=table, partitionBy=partition_by, **sink_fields)
    writer = IcebergBatchWriter("job", "out", sink, catalog, "main", str(tmp / "ckpt"))
    writer._query_id = "5b1d3c2e-0000-4000-8000-00000000000a"  # no streaming query behind it
    return writer


def table_rows(writer: IcebergBatchWriter) -> list[tuple[Any, ...]]:
    got = writer.table().scan().to_arrow().sort_by("id").to_pylist()
    return [
        (r["id"], r["name"], r["ts"], r["d"], r["tags"], dict(r["attrs"]), (r["st"]["a"], r["st"]["b"])) for r in got
    ]


def frame(spark: SparkSession, data: list[tuple[Any, ...]]) -> DataFrame:
    """As the sources give it: columns carry the field ids of the table they were read from."""
    return spark.createDataFrame(data, SCHEMA).withMetadata("id", {"parquet.field.id": 9})


@pytest.mark.parametrize(
    "partition_by",
    [[], ["hour(ts)"], ["day(ts)", "name"], ["month(ts)"], ["year(d)", "truncate(10, id)"], ["truncate(3, name)"]],
    ids=["unpartitioned", "hour", "day+identity", "month", "year+truncate-int", "truncate-string"],
)
def test_spark_writes_files_pyiceberg_commits_and_reads(
    spark: SparkSession, tmp_path: Path, partition_by: list[str]
) -> None:
    writer = sink_writer(tmp_path, "out.files", partition_by)
    data = rows(60)
    writer(frame(spark, data[:40]), 0)
    writer(frame(spark, data[40:]), 1)
    table = writer.table()
    assert spark_files.unsupported(table) is None
    assert table_rows(writer) == data
    files = [t.file for t in table.scan().plan_files()]
    for f in files:
        assert "/part-" in f.file_path, "Spark's writer, not pyiceberg's"
        assert batch_tags.parse(f.file_path) is not None
        assert not pq.read_schema(f.file_path.removeprefix("file://")).field("id").metadata, "no field ids"
        assert f.record_count > 0
    if partition_by:
        assert all(len(f.partition) == len(partition_by) for f in files)
        # one Iceberg partition per file, and as many files as partitions (per batch)
        assert len({tuple(f.partition) for f in files}) > 1
    assert find_batch(table, "main", writer.query_id, 1) is not None


def test_an_idle_batch_leaves_no_file_or_directory(spark: SparkSession, tmp_path: Path) -> None:
    writer = sink_writer(tmp_path, "out.idle", ["hour(ts)"])
    writer(frame(spark, rows(3)), 0)
    data_dir = Path(writer.table().location().removeprefix("file://")) / "data"
    before = sorted(p.name for p in data_dir.iterdir())
    writer(frame(spark, []), 1)
    unpartitioned = sink_writer(tmp_path, "out.idle2", [])
    unpartitioned(frame(spark, rows(2)), 0)
    unpartitioned(frame(spark, []), 1)
    assert sorted(p.name for p in data_dir.iterdir()) == before
    other = Path(unpartitioned.table().location().removeprefix("file://")) / "data"
    assert len(list(other.iterdir())) == 1, "batch 1 wrote an empty file, and it is gone"
    assert len(writer.table().snapshots()) == 1, "no snapshot for the idle batch"


def test_a_bucketed_table_keeps_pyicebergs_writer_and_compacts(spark: SparkSession, tmp_path: Path) -> None:
    """A bucket partition cannot be read back from a file's bounds: the files' partitions
    travel from the tasks that wrote them (this failed every commit before)."""
    compaction = {"every": 3, "min_files": 2, "protect_batches": 0}
    writer = sink_writer(tmp_path, "out.bucketed", ["bucket(4, id)"], compaction=compaction)
    data = rows(30)
    for b in range(3):
        writer(frame(spark, data[b * 10 : (b + 1) * 10]), b)
    table = writer.table()
    assert "bucket" in (spark_files.unsupported(table) or "")
    assert table_rows(writer) == data
    assert all("/part-" not in t.file.file_path for t in table.scan().plan_files())
    assert table.current_snapshot().summary.operation.value == "replace", "compacted after the third batch"
    assert len(list(table.scan().plan_files())) <= 4


def test_a_table_without_a_name_mapping_gets_one_with_the_first_spark_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    writer = sink_writer(tmp_path, "out.mapped", [])
    catalog = SqlCatalog("default", **writer.properties)
    catalog.create_namespace("out")
    catalog.create_table("out.mapped", frame(spark, []).toArrow().schema)  # made by someone else
    assert spark_files.NAME_MAPPING not in writer.table().properties
    writer(frame(spark, rows(5)), 0)
    table = writer.table()
    assert spark_files.NAME_MAPPING in table.properties
    assert len(table.snapshots()) == 1, "set in the batch's own commit"
    assert len(table_rows(writer)) == 5
