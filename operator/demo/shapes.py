"""The other shapes of a stateful pipeline, backfilled and compared with batch.

``windows`` (tumbling 10-minute windows per title) and ``sessions`` (per-profile sessions
closed by a 10-minute gap) emit a result only once the watermark passes its end, so a backfill
of ``[start, end)`` reads a warm-up before the start (the look-back: the window length, the
gap) and drains past the end (the watermark delay + the look-ahead) until the results that
start inside the window close. Each is backfilled (aligned, from the demo's playbacks history)
over a window in the middle of the generated hours into a parquet sink, and compared with a
*batch* computation of the same pipeline function over the whole history, restricted to the
window: what a live job that kept reading would have written.

Windows must match exactly. A session that chains on longer than the drain is still open when
reading stops: it is not written, and the run reports how many in a "not yet final" notice; so
sessions must be a subset of the batch, missing exactly as many as were reported open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import DataFrame, SparkSession

from kappa_operator.demo.jobs import START, DemoSettings, job_config
from kappa_operator.demo.steps import Steps, batches_poll, plural, quiet
from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration
from spark_app.contract.sinks import ParquetSink
from spark_app.examples import sessions, windows
from spark_app.examples.reference import history, in_window, rows

SHAPES: tuple[ModuleType, ...] = (windows, sessions)
LOOK_BACK = timedelta(minutes=10)
"""The examples' window length and session gap (their defaults): the warm-up, and the
look-ahead part of the drain."""
LATENESS = timedelta(minutes=10)
"""The pipelines' watermark delay (pipelineArgs ``lateness``), down from their default 30
minutes so the drain fits a one-hour demo. The lateness guard needs it >= MAX_DRIFT + the
largest split span (about 3 minutes with SPLIT), and refuses the run otherwise."""
MAX_DRIFT = "5m"
SPLIT = {"sliceSpan": "2m", "maxBundleSpan": "1m"}
"""Narrow splits keep the largest split span, and so the lateness the guard requires, small."""
DRAIN = LATENESS + LOOK_BACK
"""What the runtime resolves on its own: watermark delay + look-ahead."""
MARGIN = timedelta(minutes=2)
"""History kept after end + drain, so the read really reaches that far."""


def name(module: ModuleType) -> str:
    return str(module.__name__).rsplit(".", 1)[-1]


def window(s: DemoSettings) -> tuple[datetime, datetime]:
    """The middle third of the generated hours, ended early enough that the drain still reads
    history: 10:20-10:38 of a one-hour demo (read 10:10-10:58), 10:40-11:20 of two hours."""
    span = timedelta(hours=s.hours)
    start = START + span / 3
    end = min(START + span * 2 / 3, START + span - DRAIN - MARGIN)
    if end <= start:
        raise ValueError(f"--hours {s.hours:g} leaves no window for the windows and sessions backfills")
    return start, end


def spark_interval(d: timedelta) -> str:
    return f"{int(d.total_seconds())} seconds"


def job(s: DemoSettings, module: ModuleType) -> JobConfig:
    """The Backfill of ``module``'s pipeline over the window, into a parquet sink under out."""
    start, end = window(s)
    job_name = f"{name(module)}-backfill"
    return job_config(
        s,
        job_name,
        f"{module.__name__}:pipeline",
        "backfill",
        {
            module.OUTPUT: {
                "kind": "parquet",
                "path": str(s.job_dir(job_name) / "out"),
                "timeColumn": module.TIME_COLUMN,
            }
        },
        sources={"playbacks": {"kind": "icebergBackfill", "table": "demo.playbacks", "split": SPLIT}},
        window={"start": start.isoformat(), "end": end.isoformat(), "warmup": format_duration(LOOK_BACK)},
        alignment={"maxDrift": MAX_DRIFT, "stateDir": str(s.job_dir(job_name))},
        pipelineArgs={"lateness": spark_interval(LATENESS)},
    )


@dataclass(frozen=True)
class ShapeResult:
    output: str
    path: str
    """Where the backfill wrote (a parquet directory)."""
    report: RunResult
    window_hours: float
    batch_rows: int
    """Rows of the batch computation over the whole history whose time is in the window."""
    rows: int
    """Rows the backfill wrote."""
    matched: int
    only_batch: int
    only_backfill: int
    duplicates: int
    """Rows written (or computed) more than once."""
    open: int
    """Results the run reported still open in state when reading stopped, so not written."""

    def summary(self) -> dict[str, Any]:
        seconds = self.report.seconds
        return {
            **self.report.summary(),
            "output": self.output,
            "path": self.path,
            "batch_rows": self.batch_rows,
            "rows": self.rows,
            "matched": self.matched,
            "match_ratio": round(self.matched / self.batch_rows, 6) if self.batch_rows else 1.0,
            "only_batch": self.only_batch,
            "only_backfill": self.only_backfill,
            "duplicates": self.duplicates,
            "open_reported": self.open,
            "event_hours_per_wall_hour": round(self.window_hours / (seconds / 3600), 1) if seconds else None,
        }


def open_reported(report: RunResult) -> int:
    """Results the run counted as still open when reading stopped (not written, not lost)."""
    return report.edges.open_results if report.edges is not None else 0


def compare(
    output: str,
    path: str,
    report: RunResult,
    window_hours: float,
    batch: list[tuple[Any, ...]],
    written: list[tuple[Any, ...]],
) -> ShapeResult:
    want, got = set(batch), set(written)
    return ShapeResult(
        output=output,
        path=path,
        report=report,
        window_hours=window_hours,
        batch_rows=len(batch),
        rows=len(written),
        matched=len(want & got),
        only_batch=len(want - got),
        only_backfill=len(got - want),
        duplicates=len(written) - len(got) + len(batch) - len(want),
        open=open_reported(report),
    )


def run_shapes(s: DemoSettings, steps: Steps, spark: SparkSession) -> dict[str, ShapeResult]:
    """Backfill each shape, then compare it with batch: a step each, so both are timed."""
    plays: list[DataFrame] = []

    def whole_history() -> DataFrame:
        if not plays:  # once for both shapes, in the first comparison step (timed there)
            plays.append(history(spark, SqlCatalog("default", **s.catalog_props).load_table("demo.playbacks")))
        return plays[0]

    return {name(m): _backfill_and_compare(s, steps, spark, m, whole_history) for m in SHAPES}


def _backfill_and_compare(
    s: DemoSettings, steps: Steps, spark: SparkSession, module: ModuleType, plays: Callable[[], DataFrame]
) -> ShapeResult:
    start, end = window(s)
    cfg = job(s, module)
    sink = cfg.sinks[module.OUTPUT]
    assert isinstance(sink, ParquetSink)
    with quiet("spark_app"):
        report = steps.run(
            f"{name(module)} backfill",
            lambda: run(cfg, spark),
            batches_poll(Path(cfg.checkpoint.location) / module.OUTPUT, None),
            lambda r: f"{plural(r.batches, 'batch')}, read {r.summary()['read_past_end']} past the end",
        )

    def against_batch() -> ShapeResult:
        computed = module.pipeline({"playbacks": plays()}, lateness=spark_interval(LATENESS))[module.OUTPUT]
        batch = in_window(computed, module.TIME_COLUMN, start, end)
        # every row written, not only those in the window: the sink must not write any other
        written = rows(spark.read.parquet(sink.path)) if Path(sink.path).exists() else []
        return compare(module.OUTPUT, sink.path, report, (end - start).total_seconds() / 3600, batch, written)

    return steps.run(
        f"{name(module)} vs batch",
        against_batch,
        detail=lambda r: (
            f"{r.matched} of {r.batch_rows} rows equal"
            + (f", {r.only_batch} open ({r.open} reported)" if r.only_batch or r.open else "")
        ),
    )
