"""Blue's rows in main against green's in its branch over the compared window, by Spark: equal
output passes, a changed output is refused naming the table, the ratio and the keys, and a
ratio of 0 reports the difference without refusing it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType, TimestamptzType
from pyspark.sql import SparkSession

from spark_app.bluegreen.compare import compare_versions
from spark_app.bluegreen.tables import GreenBranch

T0 = datetime(2026, 12, 4, 10, tzinfo=UTC)
SCHEMA = Schema(
    NestedField(1, "key", StringType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "value", StringType(), required=False),
)
ARROW = pa.schema([("key", pa.string()), ("ts", pa.timestamp("us", "UTC")), ("value", pa.string())])


def rows(minutes: range, changed: frozenset[int] = frozenset()) -> pa.Table:
    return pa.table(
        {
            "key": [f"k{m}" for m in minutes],
            "ts": [T0 + timedelta(minutes=m) for m in minutes],
            "value": ["changed" if m in changed else "same" for m in minutes],
        },
        schema=ARROW,
    )


def test_equal_output_passes_a_changed_one_is_refused_or_reported(spark: SparkSession, tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("marts")
    table = catalog.create_table("marts.plays", SCHEMA)
    table.append(rows(range(0, 20)))  # blue's rows in main
    head = table.current_snapshot()
    assert head is not None
    table.manage_snapshots().create_branch(head.snapshot_id, "same").create_branch(head.snapshot_id, "v2").commit()
    table = catalog.load_table("marts.plays")
    table.delete(delete_filter="ts >= '2026-12-04T10:00:00+00:00'", branch="v2")
    catalog.load_table("marts.plays").append(rows(range(0, 20), frozenset({7})), branch="v2")  # k7 differs

    def sink(branch: str) -> GreenBranch:
        load = lambda: catalog.load_table("marts.plays")  # noqa: E731
        return GreenBranch("plays", load, dict(catalog.properties), "ts", branch, ["key"])

    start, end = T0 + timedelta(minutes=5), T0 + timedelta(minutes=15)
    same = compare_versions(spark, [sink("same")], start, end, 0.999)
    assert same.passed and same.reason() is None
    assert (same.tables[0].main_rows, same.tables[0].matched) == (10, 10)

    changed = compare_versions(spark, [sink("v2")], start, end, 0.999)
    assert not changed.passed
    (t,) = changed.tables
    assert (t.main_rows, t.branch_rows, t.matched, t.match_ratio) == (10, 10, 9, 0.9)
    assert changed.reason() == (
        "green's output differs from blue's beyond upgrade.minMatchRatio 0.999: marts.plays: 0.9000 (1 rows of "
        "blue's not in green's, 1 of green's not in blue's; keys {\"key\": \"k7\"})"
    )
    meant = compare_versions(spark, [sink("v2")], start, end, 0.0)  # the output is meant to change
    assert meant.passed and meant.tables[0].match_ratio == 0.9
