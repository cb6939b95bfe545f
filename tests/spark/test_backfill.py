"""Backfill from Iceberg history with real local Spark: equality with live output, alignment,
pruning, warm-up and the lateness guard.

When is backfill output *equal* to live output? When neither run drops a row as late (the
watermark delay covers the out-of-orderness each run creates: the ingestion lateness live,
``maxDrift + largest split span`` in the backfill) and the backfill reads what the window's
output depends on (the warm-up). Then:
- rmi (inner stream-stream join, output time = play time): every play in ``[start, end)``
  with its impressions from ``[start - 30m, end)``: the backfill's rows equal the live rows
  with ``playback_ts`` in the window, exactly.
- sessions (session windows, emitted when the watermark passes a session's end): sessions
  starting in ``[start, end)`` (warm-up >= gap tells where they begin) and closed by the
  backfill's final watermark (it reads past ``end`` by the drain: lateness + gap) equal the
  live ones, exactly; tests/spark/test_window_edges.py checks what the drain adds.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.errors import LatenessError
from spark_app.contract.trace import read_trace
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

WINDOW = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()}
DRIFT = timedelta(minutes=4)
SPLIT = {"maxBundleSpan": "2m"}


def rows(spark: SparkSession, path: Path, order: list[str]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.read.parquet(str(path)).select(*order).orderBy(*order).collect()]


@pytest.fixture(scope="module")
def rmi_live(spark: SparkSession, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    tmp = tmp_path_factory.mktemp("rmi-live")
    cfg = dataset.config(
        tmp, name="rmi-live", mode="live", trigger={"kind": "availableNow"}, sources=sources("icebergLive")
    )
    return tmp, run(cfg, spark)


@pytest.fixture(scope="module")
def rmi_backfill(
    spark: SparkSession, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, RunResult]:
    tmp = tmp_path_factory.mktemp("rmi-backfill")
    cfg = dataset.config(
        tmp,
        name="rmi-backfill",
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split=SPLIT),
        window={**WINDOW, "warmup": "30m"},
        alignment={"maxDrift": "4m"},
    )
    return tmp, run(cfg, spark)


RMI_COLUMNS = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]


def test_rmi_backfill_equals_live_output_over_the_window(
    spark: SparkSession, rmi_live: tuple[Path, RunResult], rmi_backfill: tuple[Path, RunResult]
) -> None:
    live_dir, live = rmi_live
    bf_dir, bf = rmi_backfill
    assert live.dropped_by_watermark == 0 and bf.dropped_by_watermark == 0
    live_rows = spark.read.parquet(str(live_dir / "out")).where(
        (F.col("playback_ts") >= F.lit(WINDOW["start"]).cast("timestamp"))
        & (F.col("playback_ts") < F.lit(WINDOW["end"]).cast("timestamp"))
    )
    expected = sorted(tuple(r) for r in live_rows.select(*RMI_COLUMNS).collect())
    got = rows(spark, bf_dir / "out", RMI_COLUMNS)
    assert len(expected) > 50
    assert got == expected
    assert bf.batches >= 5, "alignment should split the window into several micro-batches"


def test_admissions_never_exceed_global_watermark_plus_drift(rmi_backfill: tuple[Path, RunResult]) -> None:
    tmp, _ = rmi_backfill
    decisions = read_trace(tmp / "trace.jsonl", "admission")
    assert {d["source"] for d in decisions} == {"impressions", "playbacks"}
    drift_us = int(DRIFT.total_seconds() * 1e6)
    progressed_as_slowest = 0
    for d in decisions:
        admitted = d["admitted"]
        if d["missing"]:
            assert admitted == [], "nobody runs ahead of a member that has not reported"
            continue
        assert d["bound"] == (None if d["global_watermark"] is None else d["global_watermark"] + drift_us)
        for lower, _upper, _rows in admitted:
            assert d["bound"] is None or lower <= d["bound"]
        if d["watermark"] is not None and d["watermark"] == d["global_watermark"]:
            assert admitted, f"the slowest source must always progress: {d}"
            progressed_as_slowest += 1
    assert progressed_as_slowest >= 3
    assert any(d["throttled"] for d in decisions), "with a 4m drift some admissions must be throttled"
    ends = {(d["source"], d["end"], d["total"]) for d in decisions}
    assert all(any(e == t for s2, e, t in ends if s2 == s) for s in ("impressions", "playbacks") for _, _, t in ends)


def test_sessions_backfill_equals_live_sessions(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    cols = ["profile_id", "session_start", "session_end", "plays", "watch_s", "first_play_ts", "last_play_ts"]
    names = ("playbacks",)
    live_cfg = dataset.config(
        tmp_path / "live",
        name="sessions-live",
        pipeline="spark_app.examples.sessions:pipeline",
        output="sessions",
        mode="live",
        trigger={"kind": "availableNow"},
        sources=sources("icebergLive", names),
    )
    live = run(live_cfg, spark)
    window = {"start": (T0 + timedelta(minutes=30)).isoformat(), "end": (T0 + timedelta(minutes=105)).isoformat()}
    bf_cfg = dataset.config(
        tmp_path / "bf",
        name="sessions-bf",
        pipeline="spark_app.examples.sessions:pipeline",
        output="sessions",
        mode="backfill",
        sink_time_column="session_start",
        sources=sources("icebergBackfill", names, split=SPLIT),
        window={**window, "warmup": "10m"},
        alignment={"maxDrift": "4m"},
    )
    bf = run(bf_cfg, spark)
    assert live.dropped_by_watermark == 0 and bf.dropped_by_watermark == 0
    final_wm = bf.summary()["last_watermark"]
    live_df = spark.read.parquet(str(tmp_path / "live" / "out")).where(
        (F.col("session_start") >= F.lit(window["start"]).cast("timestamp"))
        & (F.col("session_start") < F.lit(window["end"]).cast("timestamp"))
        & (F.col("session_end") <= F.lit(final_wm).cast("timestamp"))
    )
    expected = sorted(tuple(r) for r in live_df.select(*cols).collect())
    got = rows(spark, tmp_path / "bf" / "out", cols)
    assert len(expected) > 20
    assert got == expected


def _table_files(dataset: Dataset, table: str) -> dict[str, tuple[int, int]]:
    from pyiceberg.conversions import from_bytes

    t = dataset.catalog().load_table(table)
    field = t.schema().find_field("event_ts")
    return {
        task.file.file_path: (
            from_bytes(field.field_type, task.file.lower_bounds[field.field_id]),
            from_bytes(field.field_type, task.file.upper_bounds[field.field_id]),
        )
        for task in t.scan().plan_files()
    }


@pytest.mark.parametrize("suppress", [False, True], ids=["warmup-rows-read", "warmup-output-suppressed"])
def test_window_pruning_and_warmup(spark: SparkSession, dataset: Dataset, tmp_path: Path, suppress: bool) -> None:
    window = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=60)).isoformat()}
    cfg = dataset.config(
        tmp_path,
        name="copy",
        pipeline="spark_app.examples.copy:pipeline",
        output="copy",
        mode="backfill",
        sink_time_column="event_ts" if suppress else None,
        sources=sources("icebergBackfill", ("impressions",)),
        window={**window, "warmup": "15m"},
        alignment={"mode": "unordered"},
    )
    run(cfg, spark)
    lo = int((T0 + timedelta(minutes=25)).timestamp() * 1e6)
    hi = int((T0 + timedelta(minutes=60)).timestamp() * 1e6)
    files = _table_files(dataset, "demo.impressions")
    outside = {p for p, (low, up) in files.items() if up < lo or low >= hi}
    opened = {e["path"] for e in read_trace(tmp_path / "trace.jsonl", "open")}
    assert len(outside) >= 10, "the dataset must have files outside the window for this test to mean anything"
    assert opened and not (opened & outside), "files outside the window must never be opened"
    assert opened <= set(files)

    table = dataset.catalog().load_table("demo.impressions").scan().to_arrow()
    read_from = T0 + timedelta(minutes=40) if suppress else T0 + timedelta(minutes=25)
    ts = table.column("event_ts").to_pylist()
    expected_ids = sorted(
        i
        for i, t in zip(table.column("impression_id").to_pylist(), ts, strict=True)
        if read_from.replace(tzinfo=None) <= t < (T0 + timedelta(minutes=60)).replace(tzinfo=None)
    )
    got = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r[0] for r in got.select("impression_id").collect()) == expected_ids
    assert got.schema.fieldNames() == ["impression_id", "profile_id", "title_id", "event_ts", "__metadata__"]


def test_lateness_guard_refuses_then_runs_when_drops_are_allowed(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    names = ("playbacks",)
    common: dict[str, Any] = dict(
        pipeline="spark_app.examples.sessions:pipeline",
        pipelineArgs={"lateness": "1 minute"},
        output="sessions",
        mode="backfill",
        sink_time_column="session_start",
        sources=sources("icebergBackfill", names, split=SPLIT),
        window={
            "start": (T0 + timedelta(minutes=20)).isoformat(),
            "end": (T0 + timedelta(minutes=110)).isoformat(),
            "warmup": "10m",
        },
    )
    refused = dataset.config(tmp_path / "a", name="late", alignment={"maxDrift": "10m"}, **common)
    with pytest.raises(LatenessError) as err:
        run(refused, spark)
    msg = str(err.value)
    assert "watermark delay is 1m" in msg and "to at least" in msg and "allowLateDrops" in msg
    assert not (tmp_path / "a" / "ckpt").exists(), "a refused backfill starts nothing"

    allowed = dataset.config(
        tmp_path / "b", name="late", alignment={"maxDrift": "10m", "allowLateDrops": True}, **common
    )
    report = run(allowed, spark)
    # Spark's session-window operator does not count its late drops in numRowsDroppedByWatermark
    # (they happen in its restore step); test_late_drops.py measures the drop with examples.dedup.
    assert report.input_rows > 0
    assert report.lateness is not None and report.lateness.message.startswith("allowLateDrops")
