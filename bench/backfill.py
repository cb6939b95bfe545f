"""The backfill benchmark: the ``rmi`` pipeline into the exactly-once Iceberg sink, live and
backfilled, against baselines measured in the same run.

One generated dataset (impressions + playbacks with 4x volume skew, a commit every 5 minutes,
overlapping file spans, late events) in a SQLite SqlCatalog, one local SparkSession:

* ``live``         rmi live over the commits one by one (``maxSnapshots: 1``), as production ran,
                   into ``bench.attributed_plays`` (main, partitioned by hour);
* ``aligned``      a backfill of the whole event-time range, alignment aligned (maxDrift 10m),
                   into the branch ``backfill-bench-aligned``;
* ``unordered`` / ``strict``  the same backfill in those modes, each into its own branch;
* ``bounded``      the same backfill as one Spark batch query (``alignment.mode: bounded``),
                   into its own branch, compared with main like the aligned one;
* ``aligned_parquet``  the aligned backfill into Spark's parquet file sink (the sink's overhead);
* ``spark_batch``  a batch query over the same data files with the same rmi logic, to parquet
                   (the "second batch job" users would otherwise write).

Then the aligned branch is validated against main over the window (full diff on the key
``playback_id, impression_id``: the match ratio) and published into main (one snapshot).

rows/s = input rows of both sources / wall seconds of the run (query start to end, incl. the
lateness guard and every commit). Only ratios should be compared across machines. Run from the
repository root::

    .venv/bin/python -m bench.backfill --quick --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # `python bench/backfill.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.floor import batch_overhead_s, measure_floor
from bench.memory import PeakMemory
from bench.source_throughput import (
    MASTER,
    SPARK_CONF,
    batch_frame,
    batch_stats,
    chosen_profile,
    events_listener,
    generate_dataset,
    hour_floor,
    machine,
    run_measured,
)
from spark_app.contract.config import DEFAULT_BATCH_ROW_BUDGET

log = logging.getLogger("bench.backfill")

PROFILES = {
    "quick": {"hours": 2.0, "impressions_per_hour": 20_000},
    "default": {"hours": 6.0, "impressions_per_hour": 50_000},
    # issue 15: the density users have (>= 7.5M input rows with playbacks at 1:4), and a day
    "dense": {"hours": 6.0, "impressions_per_hour": 1_000_000},
    "day": {"hours": 24.0, "impressions_per_hour": 100_000},
}
STATE_STORES: dict[str, dict[str, str]] = {
    "hdfs": {  # Spark's default, named so that a session that tried another can go back to it
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
        ),
    },
    "rocksdb": {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
}
"""Issue 15's first lever, measured one at a time: the session-wide state store."""
MAX_DRIFT = "10m"
TABLE = "bench.attributed_plays"
KEY = ["playback_id", "impression_id"]
OUTPUT = "attributed_plays"
TABLES = ("impressions", "playbacks")


class History(NamedTuple):
    """The profile's generated tables and the window of whole event-hours they cover, as the
    runs' configs take it."""

    props: dict[str, str]
    stats: Any
    generate_seconds: float
    start: datetime
    end: datetime
    window: dict[str, str]


def rmi_history(out: Path, profile: dict[str, Any]) -> History:
    props, _gen, stats, seconds = generate_dataset(out / "data", profile["hours"], profile["impressions_per_hour"])
    start, end = hour_floor(stats.first_event), hour_floor(stats.last_event) + timedelta(hours=1)
    return History(
        props, stats, seconds, start, end, {"start": start.isoformat(), "end": end.isoformat(), "warmup": "0s"}
    )


def warm_up(spark: Any, events: Any, history: History, runs: Path) -> None:
    """Untimed: the JVM, the Python workers, the join, the sink's first table creation path, over
    the window's first hour. ``measure`` waits for the query's last progress event, so none leaks
    into the next run."""
    start = history.start
    first_hour = {"start": start.isoformat(), "end": (start + timedelta(hours=1)).isoformat(), "warmup": "0s"}
    sink = iceberg_sink(table="warm.plays")
    measure(spark, events, config(history.props, runs / "warmup", "warmup", "backfill", sink, first_hour))


def spark_batch(spark: Any, history: History, path: Path) -> float:
    """The batch job a user would write instead (the same rmi logic over the tables' data files,
    to plain Parquet at ``path``); its wall seconds."""
    from spark_app.examples import rmi

    began = time.monotonic()
    frames = {t: batch_frame(spark, history.props, t, (history.start, history.end)) for t in TABLES}
    rmi.pipeline(frames)[OUTPUT].write.parquet(str(path))
    return time.monotonic() - began


def config(
    props: dict[str, str],
    run_dir: Path,
    name: str,
    mode: str,
    sink: dict[str, Any],
    window: dict[str, str] | None = None,
    alignment: dict[str, Any] | None = None,
    driver_memory: str | None = None,
    state_store: str = "hdfs",
    shuffle_partitions: int | None = None,
) -> Any:
    from spark_app.contract.config import parse_config

    live = mode == "live"
    source: dict[str, Any] = (
        {"kind": "icebergLive", "startingPosition": "earliest", "readLimit": {"maxSnapshots": 1}}
        if live
        else {"kind": "icebergBackfill"}
    )
    return parse_config(
        {
            "name": name,
            "pipeline": "spark_app.examples.rmi:pipeline",
            "mode": "live" if live else "backfill",
            "master": MASTER,
            "sparkConf": {
                # shuffle partitions: the runtime's default (the cores) unless --shuffle-partitions
                **{k: v for k, v in SPARK_CONF.items() if k != "spark.sql.shuffle.partitions"},
                **({"spark.driver.memory": driver_memory} if driver_memory else {}),
                **STATE_STORES[state_store],
                **({"spark.sql.shuffle.partitions": str(shuffle_partitions)} if shuffle_partitions else {}),
            },
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {t: {**source, "table": f"demo.{t}"} for t in TABLES},
            "sinks": {OUTPUT: {"timeColumn": "playback_ts", **sink}},
            "checkpoint": {"location": str(run_dir / "ckpt")},
            "trigger": {"kind": "availableNow"},
            "tracePath": str(run_dir / "trace.jsonl"),
            # a streaming run unless a mode is given: `auto`, the default, may run bounded (no
            # micro-batches for measure() to wait for); bounded runs go through measure_bounded()
            **(
                {}
                if live
                else {"window": window, "alignment": {"mode": "aligned", **(alignment or {}), "stateDir": str(run_dir)}}
            ),
        }
    )


def iceberg_sink(**extra: Any) -> dict[str, Any]:
    return {"kind": "iceberg", "table": TABLE, "partitionBy": ["hour(playback_ts)"], "key": KEY, **extra}


def measure(spark: Any, events: Any, cfg: Any) -> dict[str, Any]:
    from spark_app.apps.run import run
    from spark_app.contract.trace import read_trace

    events.reset()
    with PeakMemory(spark) as memory:
        started = time.monotonic()
        report = run(cfg, spark)
        wall = time.monotonic() - started
    progress = events.complete()
    stats = {**batch_stats(progress), "batch_overhead_s": batch_overhead_s(progress)}
    commits = [e for e in read_trace(cfg.trace_path) if e["event"] == "commit"] if cfg.trace_path else []
    phases = {
        f"sink_{k}_ms_median": round(statistics.median(e[f"{k}_s"] for e in timed) * 1000, 1)
        for k in ("prepare", "write", "commit")
        if (timed := [e for e in commits if f"{k}_s" in e])
    }
    return {
        **stats,
        **phases,
        **memory.result(),
        "seconds": round(wall, 3),
        "rows_per_s": round(stats["input_rows"] / wall, 1),
        "snapshots": sum(1 for e in commits if e.get("files")),
        "output_rows": sum(e.get("rows", 0) for e in commits),
        "commit_attempts_max": max((e.get("attempts", 1) for e in commits), default=0),
        "lateness_guard": report.lateness.message if report.lateness else None,
    }


def measure_bounded(spark: Any, cfg: Any) -> dict[str, Any]:
    """A bounded run (one batch query per sink: no streaming progress to listen to; its run
    report counts the rows its sources handed the pipeline)."""
    from spark_app.apps.run import run
    from spark_app.contract.trace import read_trace

    with PeakMemory(spark) as memory:
        started = time.monotonic()
        report = run(cfg, spark)
        wall = time.monotonic() - started
    choice = report.mode_choice
    commits = [e for e in read_trace(cfg.trace_path) if e["event"] == "commit"] if cfg.trace_path else []
    return {
        **memory.result(),
        "output_rows": sum(e.get("rows", 0) for e in commits),  # as measure() counts a streaming run's
        "mode": None if choice is None else choice.mode,
        "mode_reason": None if choice is None else choice.reason,
        "input_rows": report.input_rows,
        "batches": report.batches,
        "seconds": round(wall, 3),
        "rows_per_s": round(report.input_rows / wall, 1),
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.apps.session import build_session
    from spark_app.sinks.iceberg.publish import PublishResult, ValidationFailedError, compare, publish
    from spark_app.sinks.iceberg.window import TimeWindow

    name, profile, out = chosen_profile(args, PROFILES)
    runs = out / "runs"
    started = time.monotonic()
    history = rmi_history(out, profile)
    props, stats, gen_seconds, start, end, window = history
    log.info("generated %d impressions, %d playbacks; window %s .. %s", stats.impressions, stats.playbacks, start, end)

    # The session (hence the JVM) is built from this config: driver memory must be set here.
    session = config(
        props,
        runs / "session",
        "session",
        "live",
        {"kind": "console"},
        driver_memory=args.driver_memory,
        state_store=args.state_store,
        shuffle_partitions=args.shuffle_partitions,
    )
    spark = build_session(session)
    spark.sparkContext.setLogLevel("WARN")
    shuffle_partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    events = events_listener()
    spark.streams.addListener(events)

    warm_up(spark, events, history, runs)
    log.info("floor: a trivial stateful query with the same session ...")
    floor = measure_floor(spark, events, str(runs / "floor"))

    results: dict[str, dict[str, Any]] = {}
    log.info("live run (commit by commit) ...")
    results["live"] = measure(spark, events, config(props, runs / "live", "bench-live", "live", iceberg_sink()))

    def backfill(mode: str, run: str | None = None, **sink: Any) -> Any:
        alignment = {"mode": mode, "maxDrift": args.max_drift, "batchRowBudget": args.batch_row_budget}
        run = run or mode
        return config(props, runs / run, f"bench-{run}", "backfill", iceberg_sink(**sink), window, alignment)

    # The Iceberg commit on the batch's path (as before issue 29) first: the table's history,
    # which each commit reads, is then shorter for it than for the pipelined run after it.
    log.info("aligned backfill, committing before each batch ends ...")
    results["aligned_sync_commit"] = measure(spark, events, backfill("aligned", "aligned-sync", pipelinedCommit=False))
    for mode in ("aligned", "strict"):
        log.info("%s backfill ...", mode)
        results[mode] = measure(spark, events, backfill(mode))
    log.info("aligned backfill into Spark's parquet sink ...")
    parquet_dir = runs / "aligned_parquet"
    results["aligned_parquet"] = measure(
        spark,
        events,
        config(
            props,
            parquet_dir,
            "bench-parquet",
            "backfill",
            {"kind": "parquet", "path": str(parquet_dir / "out")},
            window,
            {"mode": "aligned", "maxDrift": args.max_drift, "batchRowBudget": args.batch_row_budget},
        ),
    )
    results["aligned_parquet"]["output_rows"] = spark.read.parquet(str(parquet_dir / "out")).count()

    log.info("bounded backfill ...")
    results["bounded"] = measure_bounded(spark, backfill("bounded"))
    log.info("spark batch ...")
    batch_seconds = spark_batch(spark, history, runs / "spark_batch")
    batch_rows = sum(batch_frame(spark, props, t, (start, end)).count() for t in TABLES)
    results["spark_batch"] = {
        "input_rows": batch_rows,
        "seconds": round(batch_seconds, 3),
        "rows_per_s": round(batch_rows / batch_seconds, 1),
        "output_rows": spark.read.parquet(str(runs / "spark_batch")).count(),
    }
    # Last: at dense profiles the one-batch unordered run may not fit the machine's memory, and
    # a failure must not cost the other runs' figures.
    log.info("unordered backfill ...")
    unordered_failed: str | None = None
    try:
        results["unordered"] = measure(spark, events, backfill("unordered"))
    except Exception as exc:
        unordered_failed = f"{type(exc).__name__}: {str(exc)[:500]}"
        log.error("unordered backfill failed: %s", unordered_failed)
    spark.streams.removeListener(events)

    catalog = SqlCatalog("default", **props)
    tw = TimeWindow("playback_ts", start, end)
    t0 = time.monotonic()
    # The Backfill's gate (default min match ratio): the bench measures the publish a Backfill
    # would do; a refusal is a result to report, not a reason to lose the run's numbers.
    refused: str | None = None
    try:
        published: PublishResult | None = publish(
            spark, lambda: catalog.load_table(TABLE), props, "backfill-bench-aligned", tw, key=KEY
        )
    except ValidationFailedError as exc:
        published, refused = None, str(exc)
    publish_seconds = time.monotonic() - t0
    comparison = (
        published.comparison
        if published
        else compare(spark, catalog.load_table(TABLE), props, "backfill-bench-aligned", tw, KEY)
    )
    bounded_match = compare(spark, catalog.load_table(TABLE), props, "backfill-bench-bounded", tw, KEY).match_ratio
    spark.stop()  # after publish and compare: both run in Spark now

    def of(run: str, key: str) -> Any:
        return results[run][key] if run in results else None  # unordered: None when it failed

    def ratio(a: Any, b: Any) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    rps = {k: of(k, "rows_per_s") for k in ("aligned", "unordered", "strict", "bounded", "spark_batch")}
    peak = {k: of(k, "peak_state_rows") for k in ("live", "aligned", "unordered")}
    wall_hours = results["aligned"]["seconds"] / 3600
    overhead = results["aligned"]["batch_overhead_s"]
    return {
        "bench": "backfill",
        "profile": name,
        "rows": results["aligned"]["input_rows"],
        **floor,
        "batch_overhead_s": overhead,
        "batch_overhead_s_sync_commit": results["aligned_sync_commit"]["batch_overhead_s"],
        "batch_overhead_vs_floor": round(overhead / floor["floor_batch_s"], 2)
        if overhead is not None and floor["floor_batch_s"]
        else None,
        "micro_batches": {k: of(k, "batches") for k in ("live", "aligned", "unordered", "strict")},
        "rows_per_s": rps,
        "peak_state_rows": peak,
        "peak_rss_mb": {k: of(k, "peak_rss_mb") for k in ("aligned", "unordered")},
        "peak_live_heap_mb": {k: of(k, "peak_live_heap_mb") for k in ("aligned", "unordered")},
        "unordered_failed": unordered_failed,
        "late_dropped_rows": results["aligned"]["dropped_by_watermark"],
        "match_ratio": round(comparison.match_ratio, 6),
        "bounded_match_ratio": round(bounded_match, 6),
        "bounded_event_hours_per_wall_hour": round((end - start).total_seconds() / results["bounded"]["seconds"], 1),
        "event_hours_per_wall_hour": round((end - start).total_seconds() / 3600 / wall_hours, 1),
        "ratios": {
            "aligned_vs_unordered": ratio(rps["aligned"], rps["unordered"]),
            "aligned_vs_spark_batch": ratio(rps["aligned"], rps["spark_batch"]),
            "bounded_vs_spark_batch": ratio(rps["bounded"], rps["spark_batch"]),
            "aligned_peak_vs_live_peak": ratio(peak["aligned"], peak["live"]),
            "unordered_peak_vs_live_peak": ratio(peak["unordered"], peak["live"]),
            "aligned_peak_vs_unordered_peak": ratio(peak["aligned"], peak["unordered"]),
            "iceberg_sink_wall_vs_parquet_sink": round(
                results["aligned"]["seconds"] / results["aligned_parquet"]["seconds"], 3
            ),
            # issue 29: the Iceberg commit off the batch's path (same window, same session)
            "pipelined_commit_wall_vs_sync": round(
                results["aligned"]["seconds"] / results["aligned_sync_commit"]["seconds"], 3
            ),
        },
        "validation": {
            "key": KEY,
            "main_rows_in_window": comparison.main_rows,
            "branch_rows": comparison.branch_rows,
            "matched": comparison.matched,
            "only_live": comparison.only_main,
            "only_backfill": comparison.only_branch,
        },
        "publish": {
            "seconds": round(publish_seconds, 3),
            "rows_removed": published.rows_removed,
            "rows_added": published.rows_added,
            "files_removed": published.files_removed,
            "files_added": published.files_added,
            "files_rewritten": published.files_rewritten,
        }
        if published
        else {"seconds": round(publish_seconds, 3), "refused": refused},
        "late_dropped_rows_by_run": {k: results[k].get("dropped_by_watermark") for k in results},
        "output_rows": {k: results[k]["output_rows"] for k in results},
        "runs": results,
        "machine": machine(),
        "config": {
            "profile": name,
            "driver_memory": args.driver_memory,
            "state_store": args.state_store,
            "shuffle_partitions": shuffle_partitions,
            "hours": profile["hours"],
            "impressions_per_hour": profile["impressions_per_hour"],
            "impressions": stats.impressions,
            "playbacks": stats.playbacks,
            "commits": stats.commits,
            "max_file_span_s": stats.max_file_span_s,
            "window": window,
            "max_drift": args.max_drift,
            "batch_row_budget": args.batch_row_budget,
            "generate_seconds": round(gen_seconds, 2),
            "total_seconds": round(time.monotonic() - started, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 h at 20k impressions/h (a few minutes on 2 cores)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", help="directory for the dataset and outputs (default: a temp dir, removed at the end)")
    p.add_argument("--hours", type=float, help="override the profile's hours of data")
    p.add_argument(
        "--profile",
        choices=sorted([*PROFILES, "soak"]),
        default="default",
        help="dense: 6 h at 1M impressions/h; day: 24 h at 100k/h; default: 6 h at 50k/h (overhead-bound); "
        "soak: 2000 live batches as history grows (bench/soak.py)",
    )
    p.add_argument("--state-store", choices=sorted(STATE_STORES), default="hdfs", help="Spark's state store provider")
    p.add_argument("--shuffle-partitions", type=int, help="default: one per core")
    p.add_argument("--max-drift", default=MAX_DRIFT, help="alignment.maxDrift of the aligned backfill")
    p.add_argument(
        "--batch-row-budget",
        type=int,
        default=DEFAULT_BATCH_ROW_BUDGET,
        help="alignment.batchRowBudget of the aligned and strict backfills (0: one admission round per batch)",
    )
    p.add_argument("--driver-memory", help="the local JVM's memory, e.g. 12g (dense and day need more)")
    args = p.parse_args(argv)
    if args.profile == "soak":
        from bench import soak

        rest = ["--json"] * args.json + ["--out", args.out] * bool(args.out)
        return soak.main(rest + ["--driver-memory", args.driver_memory] * bool(args.driver_memory))
    return run_measured(args, bench, "kappa-bench-backfill-")


if __name__ == "__main__":
    sys.exit(main())
