"""Late drops in a backfill: none when the watermark delay covers ``maxDrift + largest split
span``, and the drop that appears when it does not.

The table is built so its disorder is known: eight files, each 20 minutes of event time,
starting 5 minutes apart, one per snapshot. Read one file per micro-batch in event-time
order, every file overlaps the ones read before it, so a row can be up to ~20 minutes behind
the newest row already read. The pipeline is ``examples.dedup`` (stateful; Spark counts its
late drops) over unique ids, so its output is exactly the input minus the rows dropped.

Spark (>= 3.4) filters late rows of batch N with the watermark computed at the end of batch
N-1 (``eventTimeWatermarkForLateEvents``), i.e. from the rows of batches up to N-2, and a
row exactly at the watermark is late.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType, TimestampType
from pyspark.sql import SparkSession

from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import LatenessError
from tests.spark.conftest import T0

pytestmark = pytest.mark.spark

FILES, SPAN, STEP, EVERY = 8, timedelta(minutes=20), timedelta(minutes=5), timedelta(seconds=20)
ROWS = FILES * int(SPAN / EVERY)
BOUND = "24m40s"  # maxDrift 5m + the largest split span (20m - 20s)


@pytest.fixture(scope="module")
def overlapping(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("overlapping")
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("late")
    schema = Schema(
        NestedField(1, "event_id", StringType(), required=True),
        NestedField(2, "event_ts", TimestampType(), required=True),
    )
    table = catalog.create_table("late.events", schema)
    arrow = pa.schema([pa.field("event_id", pa.string(), False), pa.field("event_ts", pa.timestamp("us"), False)])
    start = T0.replace(tzinfo=None)
    for f in range(FILES):
        ts = [start + f * STEP + i * EVERY for i in range(int(SPAN / EVERY))]
        table.append(pa.table({"event_id": [f"{f}-{i}" for i in range(len(ts))], "event_ts": ts}, schema=arrow))
    return props


def config(props: dict[str, str], tmp: Path, lateness: str, **alignment: Any) -> JobConfig:
    return parse_config(
        {
            "name": "late",
            "pipeline": "spark_app.examples.dedup:pipeline",
            "pipelineArgs": {"lateness": lateness},
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {
                "events": {
                    "kind": "icebergBackfill",
                    "table": "late.events",
                    # file-level splits: this test is about the disorder whole files create
                    # (row-level slices would cut it to maxDrift + sliceSpan: test_time_slices.py)
                    "split": {"maxBundleSpan": "0s", "sliceSpan": "0s"},
                    "readLimit": {"maxFiles": 1},
                }
            },
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=2)).isoformat()},
            "alignment": {"maxDrift": "5m", **alignment},
            "sinks": {"deduplicated": {"kind": "parquet", "path": str(tmp / "out")}},
            "checkpoint": {"location": str(tmp / "ckpt")},
        }
    )


def output_ids(spark: SparkSession, path: Path) -> set[str]:
    return {r[0] for r in spark.read.parquet(str(path)).select("event_id").collect()}


def late_rows_by_sparks_rule(report: RunResult) -> int:
    """Rows of batch N at or before the watermark reported for batch N-1 (from the progress)."""
    batches = [p for p in report.progress if p.get("numInputRows", 0) > 0]
    start = T0.replace(tzinfo=None)
    files = [[start + f * STEP + i * EVERY for i in range(int(SPAN / EVERY))] for f in range(FILES)]
    assert len(batches) == FILES, "one file per micro-batch"
    late = 0
    for n in range(2, FILES):
        wm = batches[n - 1]["eventTime"]["watermark"]  # the watermark batch n-1 ran with
        cutoff = datetime.fromisoformat(wm.replace("Z", "+00:00")).replace(tzinfo=None)
        late += sum(t <= cutoff for t in files[n])  # Spark keeps only rows after it
    return late


def test_lateness_at_the_bound_drops_nothing(spark: SparkSession, overlapping: dict[str, str], tmp_path: Path) -> None:
    report = run(config(overlapping, tmp_path, "24 minutes 40 seconds"), spark)  # exactly the bound
    assert report.lateness is not None and report.lateness.ok and "no row is dropped" in report.lateness.message
    assert report.input_rows == ROWS
    assert report.dropped_by_watermark == 0
    assert len(output_ids(spark, tmp_path / "out")) == ROWS


def test_lateness_below_the_bound_is_refused_then_drops_rows(
    spark: SparkSession, overlapping: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(LatenessError, match=f"to at least {BOUND}"):
        run(config(overlapping, tmp_path / "refused", "1 minute"), spark)

    report = run(config(overlapping, tmp_path, "1 minute", allowLateDrops=True), spark)
    assert report.input_rows == ROWS
    dropped = report.dropped_by_watermark
    assert dropped > ROWS // 4, f"overlapping files read in order must lose rows with a 1m delay: {dropped}"
    assert dropped == late_rows_by_sparks_rule(report)
    assert len(output_ids(spark, tmp_path / "out")) == ROWS - dropped
