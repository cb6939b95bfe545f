"""Throughput of the kappa-iceberg streaming source (rows/s), as ratios against baselines of the same run.

One generated dataset (impressions + playbacks, written the way a streaming ingestion job writes
them: a commit every 5 minutes, late events, hour partitions) in a SQLite SqlCatalog, one local
SparkSession (local[2], UTC, 4 shuffle partitions), and the ``rmi`` pipeline (impressions join
playbacks) backfilled over the whole event-time range, each run on a fresh checkpoint/output:

* ``aligned``    backfill, alignment mode aligned (maxDrift 10m);
* ``unordered``  backfill, mode unordered (no coordination: one micro-batch per source);
* ``strict``     backfill, mode strict (no drift);
* ``spark_batch``  a *batch* query over the same data files (``spark.read.parquet`` of the files of
  ``table.scan().plan_files()``), filtered to the same window, through the same ``rmi.pipeline``
  (its ``withWatermark`` is a no-op in batch), written to parquet.

Plus a source-only pair without the join: the ``copy`` pipeline on impressions (backfill,
unordered) against ``spark.read.parquet`` of the impressions files written to parquet, whose
ratio (``source_scan_ratio``) isolates the source from the join.

Only ratios are meant to be compared across machines; absolute rows/s are reported for context.
Every timed run ends with its output written; row counts and the output comparison happen after
the clock stops. Run from the repository root::

    .venv/bin/python -m bench.source_throughput --quick --json

``--json`` prints exactly one JSON object on stdout; everything else (Spark, logs) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/source_throughput.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

log = logging.getLogger("bench.source_throughput")

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
PROFILES = {
    "quick": {"hours": 2.0, "impressions_per_hour": 20_000},
    "default": {"hours": 6.0, "impressions_per_hour": 50_000},
}
COMMIT_INTERVAL = timedelta(minutes=5)
MAX_DRIFT = "10m"
RMI_DEFAULT_LATENESS = timedelta(minutes=30)
MASTER = "local[2]"
SHUFFLE_PARTITIONS = "4"
SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
}
TABLES = ("impressions", "playbacks")
RMI_OUTPUT = "attributed_plays"
STREAM_MODES = ("aligned", "unordered", "strict")


# --- dataset -----------------------------------------------------------------------------------


def generate_dataset(root: Path, hours: float, per_hour: int) -> tuple[dict[str, str], Any, Any, float]:
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.examples.generator import GeneratorConfig, generate

    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    gen = GeneratorConfig(start=T0, hours=hours, impressions_per_hour=per_hour, commit_interval=COMMIT_INTERVAL)
    started = time.monotonic()
    stats = generate(SqlCatalog("default", **props), gen)
    return props, gen, stats, time.monotonic() - started


def hour_floor(dt: datetime) -> datetime:
    return dt.replace(minute=0, second=0, microsecond=0)


def data_files(props: dict[str, str], table: str) -> list[str]:
    """Paths of the table's current data files (what a batch job over the table would read)."""
    from pyiceberg.catalog.sql import SqlCatalog

    t = SqlCatalog("default", **props).load_table(f"demo.{table}")
    return [task.file.file_path for task in t.scan().plan_files()]


def iceberg_spark_schema(props: dict[str, str], table: str) -> Any:
    """The Spark schema the kappa-iceberg source gives the table (what the batch frames must match)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.sources.iceberg.schema import spark_schema

    return spark_schema(SqlCatalog("default", **props).load_table(f"demo.{table}").schema())


# --- job configs -------------------------------------------------------------------------------


def job_config(
    props: dict[str, str],
    run_dir: Path,
    name: str,
    window: dict[str, str],
    alignment: dict[str, Any],
    pipeline: str = "spark_app.examples.rmi:pipeline",
    output: str = RMI_OUTPUT,
    tables: tuple[str, ...] = TABLES,
    pipeline_args: dict[str, Any] | None = None,
) -> Any:
    from spark_app.contract.config import parse_config

    return parse_config(
        {
            "name": name,
            "pipeline": pipeline,
            "pipelineArgs": pipeline_args or {},
            "mode": "backfill",
            "master": MASTER,
            "sparkConf": SPARK_CONF,
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {t: {"kind": "icebergBackfill", "table": f"demo.{t}"} for t in tables},
            "sinks": {output: {"kind": "parquet", "path": str(run_dir / "out")}},
            "checkpoint": {"location": str(run_dir / "ckpt")},
            "window": window,
            "alignment": {**alignment, "stateDir": str(run_dir / "state")},
        }
    )


def choose_lateness(cfg: Any) -> tuple[timedelta, timedelta]:
    """The rmi watermark delay that lets the aligned run pass the guard: max(30m, drift + span)."""
    from spark_app.apps.lateness_guard import plan_max_span

    span = plan_max_span(cfg)
    required = cfg.alignment.effective_drift + span
    if required <= RMI_DEFAULT_LATENESS:
        return RMI_DEFAULT_LATENESS, span
    return timedelta(minutes=math.ceil(required.total_seconds() / 60)), span


# --- measured runs -----------------------------------------------------------------------------


STATE_OPERATOR_TIMES = (("update", "allUpdatesTimeMs"), ("removal", "allRemovalsTimeMs"), ("commit", "commitTimeMs"))


def batch_stats(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-micro-batch times from Spark's progress events."""
    from spark_app.contract.row_counts import delivered_rows, reused_rows, scanned_rows

    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    total = [p["durationMs"].get("triggerExecution", 0) for p in data]
    add = [p["durationMs"].get("addBatch", 0) for p in data]
    other = [t - a for t, a in zip(total, add, strict=True)]
    return {
        "input_rows": sum(delivered_rows(p) for p in progress),
        "scanned_rows": scanned_rows(progress),
        "reused_rows": reused_rows(progress),
        "batches": len(data),
        "triggers": len(progress),
        "batch_ms_median": statistics.median(total) if total else None,
        "add_batch_ms_median": statistics.median(add) if add else None,
        "non_add_batch_ms_median": statistics.median(other) if other else None,
        "trigger_ms_sum": sum(p["durationMs"].get("triggerExecution", 0) for p in progress),
        "rows_per_batch_median": statistics.median(delivered_rows(p) for p in data) if data else None,
        "dropped_by_watermark": sum(
            op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", [])
        ),
        # what Spark's state operators say they spent, summed over batches and shuffle partitions
        **{
            f"state_{name}_ms": sum(op.get(key, 0) for p in progress for op in p.get("stateOperators", []))
            for name, key in STATE_OPERATOR_TIMES
        },
        "peak_state_rows": max(
            (sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])) for p in progress), default=0
        ),
    }


def events_listener() -> Any:
    """Progress events of every query, kept until each query's terminated event has arrived.

    Spark delivers progress to listeners asynchronously: a listener removed right after
    ``awaitTermination`` can miss the last events of a query. The terminated event comes after
    all of a query's progress events on the same bus, so waiting for it gives the complete list.
    """
    import threading

    from pyspark.sql.streaming import StreamingQueryListener

    class Events(StreamingQueryListener):
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.started: dict[str, str] = {}
            self.terminated: set[str] = set()
            self.progress: list[dict[str, Any]] = []

        def reset(self) -> None:
            with self.lock:
                self.started, self.terminated, self.progress = {}, set(), []

        def onQueryStarted(self, event: Any) -> None:
            with self.lock:
                self.started[str(event.runId)] = event.name

        def onQueryProgress(self, event: Any) -> None:
            with self.lock:
                self.progress.append(json.loads(event.progress.json))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            with self.lock:
                self.terminated.add(str(event.runId))

        def complete(self, timeout: float = 60.0) -> list[dict[str, Any]]:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with self.lock:
                    if self.started and set(self.started) <= self.terminated:
                        return list(self.progress)
                time.sleep(0.05)
            raise TimeoutError(f"queries {self.started} did not report termination within {timeout} s")

    return Events()


def measure_stream(spark: Any, events: Any, cfg: Any, out: Path) -> dict[str, Any]:
    from spark_app.apps.run import run

    events.reset()
    started = time.monotonic()
    report = run(cfg, spark)
    wall = time.monotonic() - started
    progress = events.complete()
    output_rows = spark.read.parquet(str(out)).count()
    stats = batch_stats(progress)
    return {
        **stats,
        "output_rows": output_rows,
        "seconds": wall,
        "query_seconds": report.seconds,
        "outside_triggers_s": round(wall - stats["trigger_ms_sum"] / 1000, 3),
        # What RunResult saw (its listener is removed right after the query ends).
        "report_input_rows": report.input_rows,
        "report_batches": report.batches,
        "lateness_guard": report.lateness.message if report.lateness else None,
    }


def batch_frame(spark: Any, props: dict[str, str], table: str, window: tuple[datetime, datetime]) -> Any:
    """The table's data files read by Spark in batch, in the streaming source's schema, window-filtered."""
    from pyspark.sql import functions as F

    schema = iceberg_spark_schema(props, table)
    df = spark.read.parquet(*data_files(props, table))
    # pyiceberg writes Iceberg `timestamp` as parquet isAdjustedToUTC=false, which Spark reads as
    # TIMESTAMP_NTZ; the source maps it to TimestampType (UTC session): cast to the same schema.
    df = df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])
    start, end = window
    return df.where((F.col("event_ts") >= F.lit(start)) & (F.col("event_ts") < F.lit(end)))


def measure_batch(
    spark: Any,
    props: dict[str, str],
    tables: tuple[str, ...],
    window: tuple[datetime, datetime],
    logic: Callable[[dict[str, Any]], Any],
    out: Path,
) -> dict[str, Any]:
    started = time.monotonic()
    frames = {t: batch_frame(spark, props, t, window) for t in tables}
    logic(frames).write.mode("errorifexists").parquet(str(out))
    wall = time.monotonic() - started
    # Untimed: the same frames counted, and the schema checked against the source's.
    input_rows = sum(batch_frame(spark, props, t, window).count() for t in tables)
    schemas_equal = all(frames[t].schema == iceberg_spark_schema(props, t) for t in tables)
    return {
        "input_rows": input_rows,
        "output_rows": spark.read.parquet(str(out)).count(),
        "seconds": wall,
        "batches": 1,
        "schemas_equal": schemas_equal,
    }


def repeated(n: int, base: Path, name: str, fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` ``n`` times on fresh directories; keep the run with the median wall time."""
    results = []
    for i in range(n):
        run_dir = base / (name if n == 1 else f"{name}-{i}")
        shutil.rmtree(run_dir, ignore_errors=True)
        log.info("run %s%s ...", name, "" if n == 1 else f" #{i + 1}/{n}")
        r = fn(run_dir)
        r["run_dir"] = str(run_dir)
        log.info(
            "run %s: %d rows in %.2f s (%.0f rows/s), %d batches, %d output rows",
            name,
            r["input_rows"],
            r["seconds"],
            r["input_rows"] / r["seconds"],
            r["batches"],
            r["output_rows"],
        )
        results.append(r)
    results.sort(key=lambda r: r["seconds"])
    chosen = results[len(results) // 2]
    if n > 1:
        chosen["all_seconds"] = [round(r["seconds"], 3) for r in results]
    return chosen


def compare_outputs(spark: Any, a: str, b: str) -> dict[str, int]:
    """Rows only in a / only in b (multiset difference over all columns)."""
    da, db = spark.read.parquet(a), spark.read.parquet(b)
    cols = sorted(da.columns)
    da, db = da.select(*cols), db.select(*cols)
    return {"only_in_stream": da.exceptAll(db).count(), "only_in_batch": db.exceptAll(da).count()}


# --- main --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import pyarrow
    import pyiceberg
    import pyspark

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyiceberg": pyiceberg.__version__,
        "pyarrow": pyarrow.__version__,
        "platform": platform.platform(),
        # Other processes on the box skew every number: 1-minute load average when the bench ended.
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }


def rate(r: dict[str, Any]) -> float:
    return r["input_rows"] / r["seconds"] if r["seconds"] else float("nan")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from spark_app.apps.run import run
    from spark_app.apps.session import build_session
    from spark_app.examples import copy as copy_example
    from spark_app.examples import rmi

    profile = dict(PROFILES["quick" if args.quick else "default"])
    if args.hours:
        profile["hours"] = args.hours
    if args.impressions_per_hour:
        profile["impressions_per_hour"] = args.impressions_per_hour
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("data", "runs"):  # the bench's own subdirectories: a re-run starts clean
        shutil.rmtree(out / sub, ignore_errors=True)
    runs = out / "runs"
    bench_started = time.monotonic()
    load_start = round(os.getloadavg()[0], 2)

    log.info("generating %s h at %d impressions/h into %s", profile["hours"], profile["impressions_per_hour"], out)
    props, _gen, stats, gen_seconds = generate_dataset(out / "data", profile["hours"], profile["impressions_per_hour"])
    start = hour_floor(stats.first_event)
    end = hour_floor(stats.last_event) + timedelta(hours=1)
    window = {"start": start.isoformat(), "end": end.isoformat(), "warmup": "0s"}
    log.info(
        "generated %d impressions, %d playbacks in %d commits (%.1f s); window %s .. %s",
        stats.impressions,
        stats.playbacks,
        stats.commits,
        gen_seconds,
        start,
        end,
    )

    def rmi_cfg(run_dir: Path, mode: str, lateness: timedelta | None = None) -> Any:
        args_ = {"lateness": f"{int(lateness.total_seconds())} seconds"} if lateness else None
        alignment: dict[str, Any] = {"mode": mode, "maxDrift": MAX_DRIFT}
        return job_config(props, run_dir, f"bench-{mode}", window, alignment, pipeline_args=args_)

    session_cfg = rmi_cfg(runs / "session", "aligned")
    spark = build_session(session_cfg)
    spark.sparkContext.setLogLevel("WARN")
    events = events_listener()
    spark.streams.addListener(events)

    lateness, max_span = choose_lateness(session_cfg)
    lateness_arg = None if lateness == RMI_DEFAULT_LATENESS else lateness
    log.info("largest split span %s; rmi watermark delay %s", max_span, lateness)

    # Untimed warm-up (rmi over the first hour, streaming and batch): JVM classes, JIT, Python
    # workers, the stream-stream join and the data-source processes, so the first measured run
    # does not pay for them.
    warm = runs / "warmup"
    first_hour = {"start": start.isoformat(), "end": (start + timedelta(hours=1)).isoformat(), "warmup": "0s"}
    run(job_config(props, warm / "stream", "bench-warmup", first_hour, {"mode": "unordered"}), spark)
    wf = {t: batch_frame(spark, props, t, (start, start + timedelta(hours=1))) for t in TABLES}
    rmi.pipeline(wf)[RMI_OUTPUT].write.parquet(str(warm / "batch"))

    results: dict[str, dict[str, Any]] = {}
    for mode in STREAM_MODES:
        results[mode] = repeated(
            args.repeat,
            runs,
            mode,
            lambda d, mode=mode: measure_stream(spark, events, rmi_cfg(d, mode, lateness_arg), d / "out"),
        )
    results["spark_batch"] = repeated(
        args.repeat,
        runs,
        "spark_batch",
        lambda d: measure_batch(
            spark,
            props,
            TABLES,
            (start, end),
            lambda f: rmi.pipeline(f, lateness=f"{int(lateness.total_seconds())} seconds")[RMI_OUTPUT],
            d / "out",
        ),
    )
    copy_stream = repeated(
        args.repeat,
        runs,
        "copy_stream",
        lambda d: measure_stream(
            spark,
            events,
            job_config(
                props,
                d,
                "bench-copy",
                window,
                {"mode": "unordered"},
                "spark_app.examples.copy:pipeline",
                copy_example.OUTPUT,
                ("impressions",),
                {"source": "impressions"},
            ),
            d / "out",
        ),
    )
    copy_batch = repeated(
        args.repeat,
        runs,
        "copy_batch",
        lambda d: measure_batch(
            spark,
            props,
            ("impressions",),
            (start, end),
            lambda f: copy_example.pipeline(f, source="impressions")[copy_example.OUTPUT],
            d / "out",
        ),
    )

    # Sanity: same logic, same data, no drops -> the same output (counts, and row for row).
    names = [*STREAM_MODES, "spark_batch"]
    output_rows = {n: results[n]["output_rows"] for n in names}
    outputs_equal = len(set(output_rows.values())) == 1
    diffs = {
        m: compare_outputs(spark, results[m]["run_dir"] + "/out", results["spark_batch"]["run_dir"] + "/out")
        for m in STREAM_MODES
    }
    outputs_identical = all(d["only_in_stream"] == 0 and d["only_in_batch"] == 0 for d in diffs.values())
    copy_equal = compare_outputs(spark, copy_stream["run_dir"] + "/out", copy_batch["run_dir"] + "/out")
    n_rows = results["spark_batch"]["input_rows"]
    input_rows = {n: results[n]["input_rows"] for n in names}
    spark.streams.removeListener(events)
    spark.stop()

    rps = {n: rate(results[n]) for n in names}
    copy_rps = {"copy_stream": rate(copy_stream), "copy_batch": rate(copy_batch)}
    return {
        "bench": "source_throughput",
        "rows": n_rows,
        "rows_per_s": {n: round(v, 1) for n, v in rps.items()},
        "ratios": {
            "aligned_vs_unordered": round(rps["aligned"] / rps["unordered"], 3),
            "aligned_vs_spark_batch": round(rps["aligned"] / rps["spark_batch"], 3),
            "source_scan_ratio": round(copy_rps["copy_stream"] / copy_rps["copy_batch"], 3),
        },
        "output_rows": output_rows,
        "batches": {n: results[n]["batches"] for n in names},
        "seconds": {n: round(results[n]["seconds"], 3) for n in names},
        "outputs_equal": outputs_equal,
        "outputs_identical": outputs_identical,
        "input_rows": input_rows,
        "input_rows_equal": len(set(input_rows.values())) == 1,
        "output_diff_vs_spark_batch": diffs,
        "source_scan": {
            "rows": copy_batch["input_rows"],
            "rows_per_s": {k: round(v, 1) for k, v in copy_rps.items()},
            "seconds": {"copy_stream": round(copy_stream["seconds"], 3), "copy_batch": round(copy_batch["seconds"], 3)},
            "batches": {"copy_stream": copy_stream["batches"], "copy_batch": 1},
            "output_rows": {"copy_stream": copy_stream["output_rows"], "copy_batch": copy_batch["output_rows"]},
            "outputs_identical": copy_equal["only_in_stream"] == 0 and copy_equal["only_in_batch"] == 0,
        },
        "streaming_detail": {
            n: {k: v for k, v in r.items() if k not in ("run_dir",)}
            for n, r in [*((m, results[m]) for m in STREAM_MODES), ("copy_stream", copy_stream)]
        },
        "machine": {**machine(), "loadavg_1m_start": load_start},
        "config": {
            "profile": "quick" if args.quick else "default",
            "hours": profile["hours"],
            "impressions_per_hour": profile["impressions_per_hour"],
            "impressions": stats.impressions,
            "playbacks": stats.playbacks,
            "commits": stats.commits,
            "commit_interval": "5m",
            "data_files": {t: len(data_files(props, t)) for t in TABLES},
            "max_file_span_s": stats.max_file_span_s,
            "max_split_span_s": max_span.total_seconds(),
            "window": window,
            "max_drift": MAX_DRIFT,
            "rmi_lateness_s": lateness.total_seconds(),
            "rmi_lateness_raised": lateness_arg is not None,
            # How close the aligned run came to the guard refusing it (watermark delay - drift - span).
            "guard_margin_s": (lateness - session_cfg.alignment.max_drift - max_span).total_seconds(),
            "allow_late_drops": False,
            "dropped_by_watermark": {m: results[m]["dropped_by_watermark"] for m in STREAM_MODES},
            "batch_schemas_equal_source": results["spark_batch"]["schemas_equal"] and copy_batch["schemas_equal"],
            "master": MASTER,
            "shuffle_partitions": int(SHUFFLE_PARTITIONS),
            "repeat": args.repeat,
            "warmup_run": True,
            "generate_seconds": round(gen_seconds, 2),
            "total_seconds": round(time.monotonic() - bench_started, 1),
            "out": str(out),
            "rows_per_s_basis": "input rows (both sources) / wall seconds of run() incl. planning and the guard; "
            "batch: file listing + read + join + parquet write",
        },
    }


def measured_parser(doc: str | None) -> argparse.ArgumentParser:
    """The flags every bench run through ``run_measured`` shares: --json, --out, --keep."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", help="working directory (default: a temp dir, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the default temp dir (with --out it is always kept)")
    return p


def chosen_profile(args: argparse.Namespace, profiles: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any], Path]:
    """The profile ``--quick``/``--profile`` chose (``--hours`` overriding its hours), and the
    output directory with the data and runs of an earlier bench cleared."""
    name = "quick" if args.quick else args.profile
    profile = dict(profiles[name])
    if args.hours:
        profile["hours"] = args.hours
    out = Path(args.out)
    for sub in ("data", "runs"):
        shutil.rmtree(out / sub, ignore_errors=True)
    return name, profile, out


def run_measured(args: argparse.Namespace, measure: Callable[[argparse.Namespace], dict[str, Any]], prefix: str) -> int:
    """The benches' common frame: with ``--json`` everything (Python and the JVM, which inherits
    fd 1) writes to stderr and the one JSON object alone goes to the real stdout; without
    ``--out`` the data lives in a temp dir removed at the end (unless ``--keep``)."""
    saved_stdout = None
    if args.json:
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    temp = None
    if not args.out:
        temp = args.out = tempfile.mkdtemp(prefix=prefix)
    try:
        result = measure(args)
    finally:
        if temp and not getattr(args, "keep", False):
            shutil.rmtree(temp, ignore_errors=True)
    if saved_stdout is not None:
        sys.stdout.flush()
        os.write(saved_stdout, (json.dumps(result) + "\n").encode())
        os.close(saved_stdout)
    else:
        print(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 h at 20k impressions/h (< 4 min on 2 cores)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", help="directory for the dataset and outputs (default: a temp dir, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the default temp dir (with --out it is always kept)")
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the median is kept")
    p.add_argument("--hours", type=float, help="override the profile's hours of data")
    p.add_argument("--impressions-per-hour", type=int, help="override the profile's impressions per hour")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")

    return run_measured(args, bench, "kappa-bench-")


if __name__ == "__main__":
    sys.exit(main())
