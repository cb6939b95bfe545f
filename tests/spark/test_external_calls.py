"""The limit on a pipeline's external calls with real local Spark: a backfill whose pandas UDF
calls a real HTTP service (aiohttp on loopback) once per row through
``external_calls.limiter()``, from Spark's Python worker processes, is held to the job's limit
over every 1 s and 5 s window as the service saw it, and leaves
the counts the operator shows next to its checkpoint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from harness.external_service import RecordingService, max_in_window, rates
from spark_app.apps.run import run
from spark_app.external_calls import read_report
from spark_app.external_calls.pacing import window_bound
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

LIMIT = 60.0
"""Calls per second for the whole job; the window's ~500 playbacks take ~8 s at it."""


def test_a_backfill_calls_the_service_at_no_more_than_its_limit(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    service = RecordingService()
    try:
        cfg = dataset.config(
            tmp_path,
            name="calls-limited",
            mode="backfill",
            pipeline="spark_app.examples.external_labels:enrich",
            pipelineArgs={"url": service.url},
            output="enriched",
            sink_time_column="event_ts",
            sources=sources("icebergBackfill", names=("playbacks",)),
            window={"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()},
            alignment={"mode": "unordered"},
            externalCalls={"ratePerSecond": LIMIT},
        )
        report = run(cfg, spark)
    finally:
        service.stop()
    got = service.times()
    written = spark.read.parquet(str(tmp_path / "out"))
    rows = written.count()
    assert rows > 300 and len(got) >= rows  # a call per row read (the window's and any replayed)
    assert written.filter("label = concat('label-', title_id)").count() == rows

    # The service's view: the limit held over every window, within 10%.
    assert max_in_window(got, 1.0) <= window_bound(LIMIT, 1.0) <= 1.1 * LIMIT
    assert max_in_window(got, 5.0) <= 1.1 * 5 * LIMIT
    # Over the whole calling phase too. How much of the limit a job gets is a figure, not a
    # property: it depends on how busy the machine is (bench/external_calls.py measures it
    # against an unlimited run in the same process).
    seen = rates(got, LIMIT)
    assert seen["achieved_over_limit"] is not None and seen["achieved_over_limit"] <= 1.05, seen

    # What the driver counted and left for the operator.
    final = report.external_calls
    assert final is not None and final.rate_per_second == LIMIT
    assert final.calls == len(got) and final.granted >= final.calls
    assert final.waited_seconds > 0  # the limit bound: the workers could call faster
    on_disk = read_report(str(tmp_path / "ckpt"))
    assert on_disk is not None and on_disk.calls == final.calls
