"""The floor of a micro-batch, measured in the same session as the benchmark it qualifies, and
our per-batch fixed cost against it.

The floor is what Spark itself charges for one stateful micro-batch with this session's state
store and shuffle settings: Spark's ``rate-micro-batch`` source (batches back to back, like a
backfill) into a windowed count with a watermark, into the ``noop`` sink. Our fixed cost per
batch is the intercept of a least-squares fit of trigger time on rows per batch (the time a
batch costs before its first row), or, when every batch carried the same rows, the median
trigger time minus the per-row time the floor cannot tell apart (reported as such).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

FLOOR_BATCHES = 24
"""Batches measured (the first two, JVM and plan warm-up, are dropped)."""
FLOOR_ROWS_PER_BATCH = 1000


def batch_overhead_s(progress: list[dict[str, Any]]) -> float | None:
    """Seconds a micro-batch costs at zero rows: the intercept of trigger time on input rows
    over the batches that read something (None: fewer than three such batches)."""
    from spark_app.contract.row_counts import delivered_rows

    points = [
        (float(delivered_rows(p)), p["durationMs"].get("triggerExecution", 0) / 1000.0)
        for p in progress
        if p.get("numInputRows", 0) > 0
    ]
    if len(points) < 3:
        return None
    rows, seconds = zip(*points, strict=True)
    if len(set(rows)) == 1:
        return round(statistics.median(seconds), 3)
    slope, intercept = statistics.linear_regression(rows, seconds)
    if intercept < 0:  # a fit pulled below zero by a few huge batches: the cheapest batch bounds it
        return round(min(seconds), 3)
    return round(intercept, 3) if slope >= 0 else round(statistics.median(seconds), 3)


def measure_floor(spark: Any, events: Any, checkpoint: str) -> dict[str, Any]:
    """Median trigger time of a trivial stateful query in ``spark`` (``events``: the bench's
    progress listener, reset here)."""
    from pyspark.sql import functions as F

    events.reset()
    name = f"floor-{uuid.uuid4().hex[:8]}"
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", FLOOR_ROWS_PER_BATCH)
        .option("advanceMillisPerBatch", 60_000)
        .option("startTimestamp", 0)
        .load()
        .withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "5 minutes"))
        .count()
    )
    query = (
        stream.writeStream.queryName(name)
        .format("noop")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        while (query.lastProgress or {}).get("batchId", -1) < FLOOR_BATCHES + 1:
            time.sleep(0.2)
    finally:
        query.stop()
    progress = sorted(events.complete(), key=lambda p: p["batchId"])[2:]
    triggers = [p["durationMs"].get("triggerExecution", 0) / 1000.0 for p in progress if p.get("numInputRows")]
    return {
        "floor_batch_s": round(statistics.median(triggers), 3) if triggers else None,
        "floor_batches": len(triggers),
        "floor_rows_per_batch": FLOOR_ROWS_PER_BATCH,
    }
