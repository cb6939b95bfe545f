"""The switch of a blue/green upgrade on a real Iceberg table, by Spark: green's rows from the
boundary on replace blue's in one snapshot, each key once; the boundary is recorded before the
commit and a rerun commits nothing; versions off the seam switch nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType, TimestamptzType
from pyspark.sql import SparkSession

from spark_app.bluegreen.switch import BOUNDARY, SWITCH_RECORD, OffSeamError, SinkSwitch, switch
from spark_app.bluegreen.tables import GreenBranch
from spark_app.contract.blue_green import FinalBatch, Position
from spark_app.contract.storage import open_location

T0 = datetime(2026, 12, 4, 10, tzinfo=UTC)
SCHEMA = Schema(
    NestedField(1, "key", StringType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "version", StringType(), required=False),
)
ARROW = pa.schema([("key", pa.string()), ("ts", pa.timestamp("us", "UTC")), ("version", pa.string())])
AT_SEAM = {"0": {"plays": {"0": 120}}}


def rows(minutes: range, version: str) -> pa.Table:
    at = [T0 + timedelta(minutes=m) for m in minutes]
    return pa.table({"key": [f"k{m}" for m in minutes], "ts": at, "version": [version] * len(at)}, schema=ARROW)


def final(version: str, watermark_minutes: int, offsets: dict[str, object], batch: int = 7) -> FinalBatch:
    wm = int((T0 + timedelta(minutes=watermark_minutes, seconds=30)).timestamp() * 1000)
    return FinalBatch(version, "plays", Position(batch, wm, offsets))


def test_green_takes_main_from_the_boundary_on_in_one_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("marts")
    table = catalog.create_table("marts.plays", SCHEMA)
    table.append(rows(range(0, 12), "blue"))  # blue emitted up to 10:11 when it stopped
    table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, "green-rmi-g2").commit()
    table = catalog.load_table("marts.plays")
    # green's own rows over the overlap and on (its branch started from main's head: it replaces them)
    table.delete(delete_filter="ts >= '2026-12-04T10:05:00+00:00'", branch="green-rmi-g2")
    catalog.load_table("marts.plays").append(rows(range(5, 14), "green"), branch="green-rmi-g2")
    before = {s.snapshot_id for s in catalog.load_table("marts.plays").snapshots()}

    sink = SinkSwitch(
        table=GreenBranch(
            sink="plays",
            load=lambda: catalog.load_table("marts.plays"),
            catalog_properties=dict(catalog.properties),
            time_column="ts",
            branch="green-rmi-g2",
            key=["key"],
        ),
        blue=final("blue", 10, AT_SEAM),  # blue's watermark 10:10:30
        green=final("green", 13, AT_SEAM, batch=9),
        green_query_id="q-green",
    )
    record = open_location(str(tmp_path / "green"))
    (done,) = switch(spark, record, [sink], "default/rmi g2")
    b = T0 + timedelta(minutes=10, seconds=30)
    assert json.loads(record.read_bytes(SWITCH_RECORD))["boundary"] == b.isoformat()

    main = catalog.load_table("marts.plays")
    got = sorted((r["key"], r["version"]) for r in main.scan().to_arrow().to_pylist())
    # blue's rows before 10:10:30 (10:00-10:10), green's from it on (10:11-10:13): each key once
    assert got == sorted([(f"k{m}", "blue") for m in range(0, 11)] + [(f"k{m}", "green") for m in range(11, 14)])
    assert (done.rows_removed, done.rows_added) == (1, 3)
    new = [s for s in main.snapshots() if s.snapshot_id not in before]
    assert [s.snapshot_id for s in new] == [done.snapshot_id]  # one snapshot on main
    assert new[0].summary is not None and new[0].summary.additional_properties[BOUNDARY] == b.isoformat()
    assert "green-rmi-g2" not in main.metadata.refs  # the branch is gone, main kept the files

    (again,) = switch(spark, record, [sink], "default/rmi g2")  # a rerun: nothing more
    assert again.snapshot_id is None
    assert len(catalog.load_table("marts.plays").snapshots()) == len(main.snapshots())


def test_versions_off_the_seam_switch_nothing(spark: SparkSession, tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("marts")
    table = catalog.create_table("marts.plays", SCHEMA)
    table.append(rows(range(0, 3), "blue"))
    table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, "g").commit()
    sink = SinkSwitch(
        GreenBranch("plays", lambda: catalog.load_table("marts.plays"), dict(catalog.properties), "ts", "g"),
        final("blue", 2, AT_SEAM),
        final("green", 2, {"0": {"plays": {"0": 118}}}),
        "q-green",
    )
    record = open_location(str(tmp_path / "green"))
    with pytest.raises(OffSeamError, match=r"sinks.plays: green's batch 7 did not end where blue's batch 7 did"):
        switch(spark, record, [sink], "default/rmi g2")
    assert record.stat(SWITCH_RECORD) is None
    assert len(catalog.load_table("marts.plays").snapshots()) == 1
