"""Where an aligned backfill's time goes at dense (issue 42, item 4): the ``rmi`` stream-stream
join under each state store Spark offers and each batch size, against the batch job, in one
session on one dataset.

Each variant is the aligned backfill of ``bench.backfill`` (the same dataset, window, sink and
``maxDrift``), with:

* ``state_store``: Spark's HDFS-backed store (its default); RocksDB with changelog
  checkpointing (the join's four stores, state format 2); RocksDB with the join's single store
  of column families (state format 3, which Spark allows only on RocksDB);
* ``batch_row_budget``: ``alignment.batchRowBudget`` (rounds merged into one micro-batch: fewer,
  larger batches, the same rows and output).

For each it reports what Spark's own state operator says it spent (summed over the batches and
the shuffle partitions, so up to cores x wall): ``allUpdatesTimeMs`` (each input row joined
against the other side's state and added to its own), ``allRemovalsTimeMs`` (the eviction
below the state watermark: a scan of the whole state per batch for a range join),
``commitTimeMs``; and the driver JVM's CPU and garbage-collection seconds (its own MXBeans) over
the run. ``spark_batch`` is the batch job of ``bench.backfill``, measured before and after the
variants. Run from the repository root::

    .venv/bin/python -m bench.join_state --profile dense --driver-memory 12g --json
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from bench.backfill import (
    PROFILES,
    STATE_STORES,
    config,
    iceberg_sink,
    measure,
    rmi_history,
    spark_batch,
    warm_up,
)
from bench.source_throughput import (
    chosen_profile,
    events_listener,
    machine,
    measured_parser,
    run_measured,
)
from spark_app.contract.config import DEFAULT_BATCH_ROW_BUDGET

log = logging.getLogger("bench.join_state")
FORMAT_KEY = "spark.sql.streaming.join.stateFormatVersion"
STORES: dict[str, dict[str, str]] = {
    "hdfs": {**STATE_STORES["hdfs"], FORMAT_KEY: "2"},
    "rocksdb": {**STATE_STORES["rocksdb"], FORMAT_KEY: "2"},
    "rocksdb_v3": {**STATE_STORES["rocksdb"], FORMAT_KEY: "3"},
}
"""Each variant's session settings, whole (so none leaks into the next): the join's state
format 2 is Spark's default; 3 (one store of column families) Spark allows only on RocksDB."""


def jvm_seconds(spark: Any) -> dict[str, float]:
    """The driver JVM's CPU and GC seconds so far (local mode: the executors are its threads;
    Linux)."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    gc_ms = sum(bean.getCollectionTime() for bean in management.getGarbageCollectorMXBeans())
    # /proc, not the OS MXBean: py4j cannot reach its implementation's getProcessCpuTime
    fields = Path(f"/proc/{management.getRuntimeMXBean().getPid()}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (proc(5): fields 14 and 15)
    return {"cpu_s": ticks / os.sysconf("SC_CLK_TCK"), "gc_s": gc_ms / 1000}


def variant(text: str) -> tuple[str, int]:
    """``STORE[:BUDGET]``, e.g. ``hdfs:1000000``: a state store and a batch row budget."""
    store, _, budget = text.partition(":")
    if store not in STORES:
        raise argparse.ArgumentTypeError(f"{store!r}: use one of {', '.join(STORES)}")
    return store, int(budget) if budget else DEFAULT_BATCH_ROW_BUDGET


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from spark_app.apps.session import build_session

    name, profile, out = chosen_profile(args, PROFILES)
    runs = out / "runs"
    history = rmi_history(out, profile)
    props, window = history.props, history.window
    spark = build_session(
        config(props, runs / "session", "session", "live", {"kind": "console"}, driver_memory=args.driver_memory)
    )
    spark.sparkContext.setLogLevel("WARN")
    events = events_listener()
    spark.streams.addListener(events)
    warm_up(spark, events, history, runs)
    batch = [round(spark_batch(spark, history, runs / "spark_batch_0"), 3)]
    results: list[dict[str, Any]] = []
    for store, budget in args.variants:
        run = f"{store}-{budget}".replace("_", "-")
        log.info("aligned, state store %s, batch row budget %d ...", store, budget)
        for key, value in STORES[store].items():  # read by Spark when the query starts
            spark.conf.set(key, value)
        alignment = {"mode": "aligned", "maxDrift": args.max_drift, "batchRowBudget": budget}
        cfg = config(props, runs / run, f"bench-{run}", "backfill", iceberg_sink(), window, alignment)
        before = jvm_seconds(spark)
        measured = measure(spark, events, cfg)
        after = jvm_seconds(spark)
        results.append(
            {
                "state_store": store,
                "join_state_format": int(STORES[store][FORMAT_KEY]),
                "batch_row_budget": budget,
                **{k: measured[k] for k in ("seconds", "batches", "input_rows", "output_rows", "peak_state_rows")},
                **{k: measured[k] for k in ("state_update_ms", "state_removal_ms", "state_commit_ms")},
                "jvm_cpu_s": round(after["cpu_s"] - before["cpu_s"], 1),
                "jvm_gc_s": round(after["gc_s"] - before["gc_s"], 1),
            }
        )
    batch.append(round(spark_batch(spark, history, runs / "spark_batch_1"), 3))
    spark.stop()
    baseline = min(batch)
    for r in results:
        r["vs_spark_batch"] = round(baseline / r["seconds"], 3)
    return {
        "bench": "join_state",
        "profile": name,
        "spark_batch_s": batch,
        "variants": results,
        "machine": machine(),
        "config": {"driver_memory": args.driver_memory, "max_drift": args.max_drift, "window": window, **profile},
    }


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="2 h at 20k impressions/h")
    p.add_argument("--hours", type=float, help="override the profile's hours of data")
    p.add_argument("--profile", choices=sorted(PROFILES), default="dense")
    p.add_argument("--driver-memory", help="the local JVM's memory, e.g. 12g (dense needs more than the default)")
    p.add_argument("--max-drift", default="10m", help="alignment.maxDrift of every variant")
    p.add_argument(
        "--variant", dest="variants", type=variant, action="append",
        help="STORE[:BATCH_ROW_BUDGET], repeatable; STORE one of hdfs, rocksdb, rocksdb_v3 "
        "(default: hdfs, hdfs:1000000, rocksdb_v3)",
    )  # fmt: skip
    args = p.parse_args(argv)
    args.variants = args.variants or [variant("hdfs"), variant("hdfs:1000000"), variant("rocksdb_v3")]
    return run_measured(args, bench, "kappa-bench-join-state-")


if __name__ == "__main__":
    raise SystemExit(main())
