"""A backfill whose sources start far apart in event time (one table's history begins more
than maxDrift after the other's): a shape the generated dataset never has, where both tables
start together. Spark asks playbacks first here: it is held in the first batch (impressions
has not reported yet) and impressions, 20 minutes later, is beyond the bound, so the first
construction admits nothing. Spark runs batch 0 on the first offsets anyway, asks again, and
the run completes (``forecast.simulate`` models this). One round per batch and merged
admission rounds give the same output."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from spark_app.apps.run import run
from tests.spark.conftest import T0, Dataset, sources
from tests.spark.test_coordinator_alignment import output

pytestmark = pytest.mark.spark

LATE = T0 + timedelta(minutes=50)
WINDOW = {"start": (T0 + timedelta(minutes=20)).isoformat(), "end": (T0 + timedelta(minutes=90)).isoformat()}


def late_copy(dataset: Dataset, namespace: str, late: str) -> None:
    """``<namespace>.impressions`` / ``.playbacks``: the dataset's rows, ``late``'s from LATE on."""
    catalog = SqlCatalog("default", **dataset.props)
    catalog.create_namespace_if_not_exists(namespace)
    for table in ("impressions", "playbacks"):
        src = catalog.load_table(f"demo.{table}")
        rows = src.scan().to_arrow()
        if table == late:
            rows = rows.filter(pc.field("event_ts") >= LATE.replace(tzinfo=None))
        dst = catalog.create_table(f"{namespace}.{table}", schema=src.schema())
        for start in range(0, rows.num_rows, 2_000):  # several files, as a writer leaves them
            dst.append(rows.slice(start, 2_000))


def test_a_source_starting_more_than_max_drift_later_does_not_end_the_backfill(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, late: str = "impressions"
) -> None:
    namespace = f"late_{late}"
    late_copy(dataset, namespace, late)
    srcs: dict[str, Any] = sources("icebergBackfill", split={"maxBundleSpan": "2m"})
    for s in srcs.values():
        s["table"] = s["table"].replace("demo.", f"{namespace}.")
    outputs = []
    for budget in (0, 30_000):
        tmp = tmp_path / f"budget-{budget}"
        cfg = dataset.config(
            tmp,
            name=f"late-{late}-{budget}",
            mode="backfill",
            sink_time_column="playback_ts",
            sources=srcs,
            window={**WINDOW, "warmup": "30m"},
            alignment={"maxDrift": "4m", "batchRowBudget": budget},
        )
        report = run(cfg, spark)
        assert report.dropped_by_watermark == 0
        outputs.append(output(spark, tmp))
    assert len(outputs[0]) > 20 and outputs[0] == outputs[1]
