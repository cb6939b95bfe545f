"""The read-rate cap with real local Spark: a capped aligned backfill writes exactly what the
uncapped one writes, admits the same splits in the same order (the cap only delays them),
completes under AvailableNow (no early end while it waits for tokens), and reads at no more
than 1.1x the cap, measured from its own counters and wall time."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.trace import read_trace
from spark_app.planning.read_rate import BURST_S
from tests.spark.conftest import T0, Dataset, sources
from tests.spark.test_backfill import RMI_COLUMNS, rows

pytestmark = pytest.mark.spark

WINDOW = {
    "start": (T0 + timedelta(minutes=40)).isoformat(),
    "end": (T0 + timedelta(minutes=80)).isoformat(),
    "warmup": "30m",
}
READ_SECONDS = 30
"""The cap is set so that reading the window takes about this long: long enough that the
bucket's burst (BURST_S of rate) is a small part of the average."""


def backfill(spark: SparkSession, dataset: Dataset, tmp: Path, name: str, **extra: Any) -> RunResult:
    cfg = dataset.config(
        tmp,
        name=name,
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m", "targetBytes": 64 * 1024}),
        window=WINDOW,
        alignment={"maxDrift": "4m"},
        **extra,
    )
    return run(cfg, spark)


def admitted_in_order(tmp: Path) -> dict[str, list[list[int]]]:
    out: dict[str, list[list[int]]] = {}
    for d in read_trace(tmp / "trace.jsonl", "admission"):
        out.setdefault(d["source"], []).extend(d["admitted"])
    return out


def test_a_capped_backfill_writes_the_same_output_at_no_more_than_the_cap(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    free = backfill(spark, dataset, tmp_path / "free", "rr-free")
    total = free.summary()["read_bytes"]
    assert total > 0 and free.read_cap == (None, None) and free.summary()["read_cap"] is None
    cap = max(1, total // READ_SECONDS)

    capped = backfill(spark, dataset, tmp_path / "capped", "rr-capped", readRate={"maxBytesPerSecond": cap})
    got = capped.summary()
    assert got["read_cap"] == {"bytes_per_s": float(cap), "files_per_s": None}

    # Same output, same splits in the same order: the cap delays, never reorders.
    assert rows(spark, tmp_path / "capped" / "out", RMI_COLUMNS) == rows(spark, tmp_path / "free" / "out", RMI_COLUMNS)
    assert len(rows(spark, tmp_path / "free" / "out", RMI_COLUMNS)) > 50
    assert admitted_in_order(tmp_path / "capped") == admitted_in_order(tmp_path / "free")
    assert got["read_bytes"] == total and got["read_files"] == free.summary()["read_files"]
    assert capped.dropped_by_watermark == 0 == free.dropped_by_watermark

    # The cap bound: some admissions were cut short by the bucket. Whether the query also
    # waited for tokens depends on the machine: a loaded one runs batches slower than the
    # bucket refills, so the cut alone holds the rate (read_wait_s is 0 then).
    decisions = read_trace(tmp_path / "capped" / "trace.jsonl", "admission")
    assert any(d["rate_limited"] for d in decisions) and got["read_wait_s"] >= 0
    drift_us = 4 * 60_000_000
    for d in decisions:  # alignment holds under the cap
        for lower, _upper, _rows in d["admitted"]:
            assert d["bound"] is None or lower <= d["bound"]
        assert d["bound"] is None or d["global_watermark"] is None or d["bound"] == d["global_watermark"] + drift_us

    # Reads at <= 1.1x the cap: over the run's wall time, and over the reading span itself
    # (first to last admission, on the bucket's clock: a trace line's own time is written
    # after the coordinator's report), where the bucket allows at most cap * span + its burst
    # or one split, whichever is larger.
    assert got["read_bytes_per_s"] / cap <= 1.1
    admitted = [(d["taken_at"], d["bytes"]) for d in decisions if d["bytes"]]
    span = admitted[-1][0] - admitted[0][0]
    largest = max(d["bytes"] for d in decisions)
    assert sum(b for _, b in admitted) <= cap * span + max(cap * BURST_S, largest) + 1
    assert span >= 0.5 * READ_SECONDS, "the capped read was spread over about READ_SECONDS"
