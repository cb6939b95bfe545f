"""Time slices on a real table with late events: the largest split span (and the lateness the
guard requires) drops from the widest file to about ``sliceSpan``, every row is read exactly
once, and a backfill whose watermark delay covers ``maxDrift + sliceSpan``, far less than the
file-level requirement, drops nothing.

The table is written the way ingestion writes it (``examples.generator``): a commit every
minute, hour partitions, 1% of the events 1..90 minutes late (``LATE_THRESHOLD`` is where
"late" starts). A late event lands in the file of its commit and its event hour, so almost
every file spans tens of minutes while all but a few of its rows lie within ~2 minutes.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from harness.jvm_reads import read_splits
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import LatenessError
from spark_app.contract.trace import read_trace
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.jvm import DECODED_ROWS_MAX_BYTES
from spark_app.planning.split_spans import fit_sources
from spark_app.planning.splits import Split, max_span
from spark_app.sources.frames import source_spec
from spark_app.sources.iceberg.stream import backfill_plan, backfill_plan_and_layouts
from tests.spark.conftest import T0

pytestmark = pytest.mark.spark

MIN = 60_000_000
DRIFT, SLICE = timedelta(minutes=5), timedelta(minutes=5)


@pytest.fixture(scope="module")
def late_table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("late-events")
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    gen = GeneratorConfig(
        start=T0,
        hours=1,
        impressions_per_hour=3000,
        commit_interval=timedelta(minutes=1),
        late_fraction=0.01,
        max_lateness=timedelta(minutes=90),
    )
    stats = generate(SqlCatalog("default", **props), gen)
    assert stats.late_events > 0 and stats.max_file_span_s > 30 * 60, "precondition: wide files"
    return props


def config(
    props: dict[str, str], tmp: Path, slice_span: str | None, window: tuple[int, int] = (0, 60), **extra: Any
) -> JobConfig:
    """``slice_span`` None: no split settings at all (the spans are fitted to the lateness)."""
    split = {} if slice_span is None else {"split": {"sliceSpan": slice_span, "maxBundleSpan": "0s"}}
    return parse_config(
        {
            "name": "slices",
            "pipeline": "spark_app.examples.dedup:pipeline",
            "pipelineArgs": {"key": "impression_id", "lateness": "10 minutes"},
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {
                "impressions": {
                    "kind": "icebergBackfill",
                    "table": "demo.impressions",
                    **split,
                }
            },
            "window": {
                "start": (T0 + timedelta(minutes=window[0])).isoformat(),
                "end": (T0 + timedelta(minutes=window[1])).isoformat(),
            },
            "sinks": {"deduplicated": {"kind": "parquet", "path": str(tmp / "out")}},
            "checkpoint": {"location": str(tmp / "ckpt")},
            **extra,
        }
    )


def plan_and_read(
    spark: SparkSession, props: dict[str, str], cfg: JobConfig, tmp: Path
) -> tuple[list[Split], list[str]]:
    """The backfill's plan for the current snapshot, and every id the JVM reads through it (one
    task)."""
    spec = source_spec(cfg, "deduplicated", "impressions", 1)
    table = SqlCatalog("default", **props).load_table("demo.impressions")
    splits, layouts = backfill_plan_and_layouts(table, spec, table.current_snapshot().snapshot_id)  # type: ignore[union-attr]
    rows = read_splits(spark, spec, splits, layouts, str(tmp / f"read-{spec.source.split.slice_span}"))
    return splits, [r["impression_id"] for r in rows]


def window_ids(props: dict[str, str], column: str, lo_min: int, hi_min: int) -> list[str]:
    rows = SqlCatalog("default", **props).load_table("demo.impressions").scan().to_arrow().to_pylist()
    lo, hi = (
        (T0 + timedelta(minutes=lo_min)).replace(tzinfo=None),
        (T0 + timedelta(minutes=hi_min)).replace(tzinfo=None),
    )
    value = (lambda r: r["__metadata__"]["ingestion_ts"]) if "." in column else (lambda r: r[column])
    return sorted(r["impression_id"] for r in rows if lo <= value(r) < hi)


@pytest.mark.parametrize("column", ["event_ts", "__metadata__.ingestion_ts"])
@pytest.mark.parametrize("window", [(0, 60), (20, 50)], ids=["whole", "inner"])
def test_slices_narrow_the_largest_span_and_read_every_row_once(
    spark: SparkSession, late_table: dict[str, str], tmp_path: Path, column: str, window: tuple[int, int]
) -> None:
    ordering = {"alignment": {"maxDrift": "5m", "orderingColumn": column}}
    files, file_ids = plan_and_read(spark, late_table, config(late_table, tmp_path, "0s", window, **ordering), tmp_path)
    sliced, sliced_ids = plan_and_read(
        spark, late_table, config(late_table, tmp_path, "5m", window, **ordering), tmp_path
    )
    expected = window_ids(late_table, column, *window)

    assert max_span(files) > 20 * MIN, "file-level: a few late rows make files wide"
    assert max_span(sliced) <= SLICE.total_seconds() * 1e6, "sliced: no split wider than sliceSpan"
    assert any(p.time_range is not None for s in sliced for p in s.pieces)
    assert sorted(file_ids) == expected
    assert sorted(sliced_ids) == expected  # every row of the window ...
    assert max(Counter(sliced_ids).values()) == 1  # ... exactly once across all slices
    # slices count their rows exactly (file pieces count the whole file): with no file cut
    # by the window, the plan's rows are the window's rows
    time_rows = sum(p.rows for s in sliced for p in s.pieces if p.time_range is not None)
    sliced_paths = {p.path for s in sliced for p in s.pieces if p.time_range is not None}
    whole = [p for s in sliced for p in s.pieces if p.time_range is None]
    assert not {p.path for p in whole} & sliced_paths
    if window == (0, 60) and column == "event_ts":
        assert time_rows + sum(p.rows for p in whole) == len(expected)


def test_backfill_with_lateness_for_slices_drops_nothing(
    spark: SparkSession, late_table: dict[str, str], tmp_path: Path
) -> None:
    """Watermark delay 10m = maxDrift + sliceSpan: refused at file level, exact when sliced."""
    alignment = {"alignment": {"maxDrift": "5m"}}
    with pytest.raises(LatenessError, match="largest split span"):
        run(config(late_table, tmp_path / "files", "0s", **alignment), spark)

    report = run(config(late_table, tmp_path / "sliced", "5m", **alignment), spark)
    assert report.lateness is not None and report.lateness.ok
    assert report.lateness.required <= DRIFT + SLICE < timedelta(minutes=20)
    assert report.dropped_by_watermark == 0
    expected = window_ids(late_table, "event_ts", 0, 60)
    assert report.input_rows == len(expected)
    got = [r[0] for r in spark.read.parquet(str(tmp_path / "sliced" / "out")).select("impression_id").collect()]
    assert sorted(got) == expected


def test_strict_takes_no_more_batches_sliced_than_by_files(
    spark: SparkSession, late_table: dict[str, str], tmp_path: Path
) -> None:
    """Issue 29 item 6: slicing a late-event table at 5 minutes doubles its splits, but strict's
    admission rounds merge the slices no late row separates, so a strict backfill takes at
    most the batches it took at file level, with the same output (lateness 2h: both plans
    pass the guard). With no split settings, the spans fit the 2h lateness (30m each,
    ``split_spans``): fewer splits than whole files, and no more batches. Measured on
    2026-11-26 (budget 300 rows): (batches, splits) whole files (12, 81), 5m slices (12, 93),
    fitted (3, 3)."""
    runs = {}
    for span in ("0s", "5m", None):
        cfg = config(
            late_table,
            tmp_path / str(span),
            span,
            pipelineArgs={"key": "impression_id", "lateness": "2 hours"},
            alignment={"mode": "strict", "batchRowBudget": 300},
        )
        report = run(cfg, spark)
        out = str(tmp_path / str(span) / "out")
        ids = [r[0] for r in spark.read.parquet(out).select("impression_id").collect()]
        fitted = fit_sources(cfg, timedelta(hours=2))
        runs[span] = (report.batches, len(backfill_plan(*_plan_inputs(late_table, fitted))), sorted(ids))
    (file_batches, file_splits, file_ids), (sliced_batches, sliced_splits, sliced_ids) = runs["0s"], runs["5m"]
    fit_batches, fit_splits, fit_ids = runs[None]
    assert sliced_splits > file_splits, "precondition: slicing makes more splits"
    assert sliced_batches <= file_batches, runs
    assert fit_splits <= file_splits and fit_batches <= file_batches, runs
    assert sliced_ids == file_ids == fit_ids == window_ids(late_table, "event_ts", 0, 60)


def _plan_inputs(props: dict[str, str], cfg: JobConfig) -> tuple[Any, Any, int]:
    spec = source_spec(cfg, "deduplicated", "impressions", 1)
    table = SqlCatalog("default", **props).load_table("demo.impressions")
    return table, spec, table.current_snapshot().snapshot_id  # type: ignore[union-attr]


def _opened_rows(props: dict[str, str], trace_file: Path) -> tuple[int, int]:
    """Rows of the files a run's tasks opened: counted once per file, and once per opening."""
    table = SqlCatalog("default", **props).load_table("demo.impressions")
    rows = {task.file.file_path: task.file.record_count for task in table.scan().plan_files()}
    opened = [e["path"] for e in read_trace(trace_file, "open")]
    assert all(e["row_groups"] is None for e in read_trace(trace_file, "open")), "precondition: whole files"
    return sum(rows[p] for p in set(opened)), sum(rows[p] for p in opened)


def test_a_file_read_in_several_batches_is_decoded_once(
    spark: SparkSession, late_table: dict[str, str], tmp_path: Path
) -> None:
    """Issue 42 item 3: a late-tailed file is read by every batch its slices fall in, but its
    first read keeps the rows of its later slices, so it is decoded once; Spark's input rows
    are the rows delivered. With nothing kept (``decodedRows.maxBytes`` 0) each read decodes
    it again, and with a bound that holds some of it, some reads do: the same rows out."""
    extra = {"alignment": {"maxDrift": "5m", "batchRowBudget": 300}, "tracePath": str(tmp_path / "kept.jsonl")}
    kept = run(config(late_table, tmp_path / "kept", "5m", **extra), spark)
    once, per_open = _opened_rows(late_table, tmp_path / "kept.jsonl")
    assert per_open > once, "precondition: files opened by several batches"
    assert kept.scanned_rows == once
    assert kept.reused_rows > 0
    assert sum(p["numInputRows"] for p in kept.progress) == kept.input_rows  # the window cuts no row here

    runs = {}
    for name, bound in (("decoded", "0"), ("bounded", "12000")):
        spark.conf.set(DECODED_ROWS_MAX_BYTES, bound)
        try:
            extra["tracePath"] = str(tmp_path / f"{name}.jsonl")
            runs[name] = run(config(late_table, tmp_path / name, "5m", **extra), spark)
        finally:
            spark.conf.unset(DECODED_ROWS_MAX_BYTES)
    decoded, bounded = runs["decoded"], runs["bounded"]
    assert decoded.scanned_rows == _opened_rows(late_table, tmp_path / "decoded.jsonl")[1] > once
    assert decoded.reused_rows == 0
    # 12 KB holds some files' later rows, not all: between the two, and the same rows out
    assert once < bounded.scanned_rows < decoded.scanned_rows
    assert bounded.reused_rows > 0
    expected = window_ids(late_table, "event_ts", 0, 60)
    for name in ("kept", "decoded", "bounded"):
        got = [r[0] for r in spark.read.parquet(str(tmp_path / name / "out")).select("impression_id").collect()]
        assert sorted(got) == expected
