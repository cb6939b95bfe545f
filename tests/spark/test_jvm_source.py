"""The JVM data path on a real table: what Spark's own Parquet reader returns for the pieces
the planner hands it (row-group byte ranges, time slices, the source's filter, Iceberg's field
ids and types), checked against pyiceberg's read of the same table."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestampType, UUIDType
from pyspark.sql import SparkSession

from harness.jvm_reads import read_splits
from spark_app.contract.config import parse_config
from spark_app.planning.splits import FilePiece, Split, TimeRange
from spark_app.sources.frames import source_spec
from spark_app.sources.iceberg.spec import SourceSpec

pytestmark = pytest.mark.spark

T0 = datetime(2026, 1, 1)
ROWS, GROUP = 400, 100
US = 1_000_000


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One data file of four row groups of 100 rows; row i has ts = T0 + i s, every 50th a null ts."""
    root = tmp_path_factory.mktemp("jvm-source")
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("t")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestampType(), required=False),
        NestedField(3, "name", StringType(), required=False),
        NestedField(4, "u", UUIDType(), required=False),
    )
    t = catalog.create_table("t.events", schema, properties={"write.parquet.row-group-limit": str(GROUP)})
    uuids = [uuid.UUID(int=i * 7919) for i in range(ROWS)]
    data = pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "ts": pa.array(
                [None if i % 50 == 49 else T0 + timedelta(seconds=i) for i in range(ROWS)], pa.timestamp("us")
            ),
            "name": pa.array(["abc"[i % 3] for i in range(ROWS)]),
            "u": pa.array([u.bytes for u in uuids], pa.binary(16)),
        }
    )
    t.append(data)
    with t.update_schema() as update:  # renamed after the write: the file still says "name"
        update.rename_column("name", "letter")
    t = catalog.load_table("t.events")
    [task] = list(t.scan().plan_files())
    f = task.file
    assert len(f.split_offsets or ()) == ROWS // GROUP, "precondition: one file of four row groups"
    return {
        "props": props,
        "path": f.file_path,
        "layout": (f.file_size_in_bytes, tuple(f.split_offsets)),
        "uuids": uuids,
    }


def spec_of(table: dict[str, Any], tmp: Path, **source: Any) -> SourceSpec:
    cfg = parse_config(
        {
            "name": "jvm",
            "pipeline": "spark_app.examples.dedup:pipeline",
            "mode": "live",
            "catalogs": {"default": {"type": "sql", **table["props"]}},
            "sources": {"events": {"kind": "icebergLive", "table": "t.events", "orderingColumn": "ts", **source}},
            "sinks": {"out": {"kind": "console"}},
            "checkpoint": {"location": str(tmp / "ckpt")},
        }
    )
    return source_spec(cfg, "out", "events", 1)


def ids(spark: SparkSession, table: dict[str, Any], tmp: Path, pieces: list[FilePiece], **source: Any) -> list[int]:
    splits = [Split(0, 0, (p,), p.rows, p.size_bytes) for p in pieces]
    rows = read_splits(spark, spec_of(table, tmp, **source), splits, {table["path"]: table["layout"]}, str(tmp / "c"))
    return sorted(r["id"] for r in rows)


def test_a_run_of_row_groups_reads_exactly_their_rows(
    spark: SparkSession, table: dict[str, Any], tmp_path: Path
) -> None:
    got = ids(spark, table, tmp_path, [FilePiece(table["path"], (1, 2), 200, 1)])
    assert got == list(range(100, 300))
    apart = ids(spark, table, tmp_path / "apart", [FilePiece(table["path"], (0, 3), 200, 1)])
    assert apart == [*range(0, 100), *range(300, 400)]


def test_time_slices_sharing_row_groups_read_each_row_once(
    spark: SparkSession, table: dict[str, Any], tmp_path: Path
) -> None:
    def at(s: int) -> int:
        return (
            int((T0 + timedelta(seconds=s)).timestamp() * US)
            if T0.tzinfo
            else int((T0 - datetime(1970, 1, 1)).total_seconds() * US) + s * US
        )

    path = table["path"]
    first = FilePiece(path, (0, 1), 1, 1, TimeRange("ts", at(50), at(150)))
    second = FilePiece(path, (1, 2), 1, 1, TimeRange("ts", at(150), at(210)))  # group 1 read by both
    got = ids(spark, table, tmp_path, [first, second])
    assert got == [i for i in range(50, 210) if i % 50 != 49]  # null ts: in no slice
    whole = ids(spark, table, tmp_path / "whole", [FilePiece(path, None, 400, 1)])
    assert whole == list(range(ROWS))  # an unsliced piece keeps rows whose ts is null


def test_the_source_filter_keeps_what_iceberg_keeps(spark: SparkSession, table: dict[str, Any], tmp_path: Path) -> None:
    text = "letter = 'b' AND ts >= '2026-01-01T00:01:00' AND id NOT IN (70, 73)"
    got = ids(spark, table, tmp_path, [FilePiece(table["path"], None, 400, 1)], filter=text)
    expected = SqlCatalog("default", **table["props"]).load_table("t.events").scan(row_filter=text).to_arrow()
    assert got == sorted(expected.column("id").to_pylist())
    assert len(got) > 50


def test_renamed_columns_and_uuids_read_as_iceberg_shows_them(
    spark: SparkSession, table: dict[str, Any], tmp_path: Path
) -> None:
    splits = [Split(0, 0, (FilePiece(table["path"], (0,), 100, 1),), 100, 1)]
    rows = read_splits(spark, spec_of(table, tmp_path), splits, {table["path"]: table["layout"]}, str(tmp_path / "c"))
    by_id = {r["id"]: r for r in rows}
    assert [by_id[i]["letter"] for i in range(6)] == list("abcabc")  # by field id, not by the file's name
    assert [by_id[i]["u"] for i in range(3)] == [str(u) for u in table["uuids"][:3]]
    assert by_id[1]["ts"] == T0 + timedelta(seconds=1)
