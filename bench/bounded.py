"""A bounded backfill (``alignment.mode: bounded``: the job's own pipeline over batch reads,
one Spark batch query per sink; by default as ``auto``, the default mode, chooses it, its
proof timed with the run) against the batch job a user would write instead, measured
in the same run on the same data: ``spark_batch`` (``spark.read.parquet`` of the tables' data
files, the same rmi logic, to Parquet), run before and after the bounded run (the mean of the
two is the baseline, so neither gets the other's warm JVM). The bounded run writes into the
exactly-once Iceberg sink (its branch, one commit), as a Backfill does; its rows are compared
with the batch job's in both directions (``match`` 1.0: no row differs).

rows/s = input rows of both sources / wall seconds. Run from the repository root::

    .venv/bin/python -m bench.bounded --profile dense --driver-memory 12g --json
"""

from __future__ import annotations

import argparse
import logging
import time
from datetime import timedelta
from typing import Any

from bench.backfill import OUTPUT, PROFILES, TABLES, config, iceberg_sink, measure_bounded
from bench.source_throughput import (
    batch_frame,
    chosen_profile,
    generate_dataset,
    hour_floor,
    machine,
    measured_parser,
    run_measured,
)

log = logging.getLogger("bench.bounded")
KEY = ["playback_id", "impression_id"]


def bench(args: argparse.Namespace) -> dict[str, Any]:

    from spark_app.examples import rmi
    from spark_app.runtime import build_session

    name, profile, out = chosen_profile(args, PROFILES)
    runs = out / "runs"
    props, _gen, stats, gen_seconds = generate_dataset(out / "data", profile["hours"], profile["impressions_per_hour"])
    start, end = hour_floor(stats.first_event), hour_floor(stats.last_event) + timedelta(hours=1)
    window = {"start": start.isoformat(), "end": end.isoformat(), "warmup": "0s"}
    session = config(props, runs / "session", "session", "live", {"kind": "console"}, driver_memory=args.driver_memory)
    spark = build_session(session)
    spark.sparkContext.setLogLevel("WARN")

    def spark_batch(run: str) -> dict[str, Any]:
        t0 = time.monotonic()
        frames = {t: batch_frame(spark, props, t, (start, end)) for t in TABLES}
        rmi.pipeline(frames)[OUTPUT].write.parquet(str(runs / run))
        seconds = time.monotonic() - t0
        rows = sum(batch_frame(spark, props, t, (start, end)).count() for t in TABLES)
        return {"input_rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1)}

    # untimed warm-up: the JVM, the Python workers, the join's code paths
    first_hour = (start, start + timedelta(hours=1))
    rmi.pipeline({t: batch_frame(spark, props, t, first_hour) for t in TABLES})[OUTPUT].write.format("noop").mode(
        "overwrite"
    ).save()
    log.info("spark batch (before) ...")
    before = spark_batch("spark_batch_1")
    log.info("bounded backfill ...")
    alignment = {"mode": args.mode, "stateDir": str(runs / "bounded")}
    bounded_cfg = config(props, runs / "bounded", "bench-bounded", "backfill", iceberg_sink(), window, alignment)
    bounded = measure_bounded(spark, bounded_cfg)
    log.info("spark batch (after) ...")
    after = spark_batch("spark_batch_2")
    baseline = (before["rows_per_s"] + after["rows_per_s"]) / 2

    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("default", **props).load_table("bench.attributed_plays")
    branch = table.refs()[bounded_cfg.sink_branch(OUTPUT)].snapshot_id
    written = spark.createDataFrame(table.scan(snapshot_id=branch).to_arrow().select(KEY).to_pandas())
    expected = spark.read.parquet(str(runs / "spark_batch_1")).select(*KEY)
    only_batch = expected.exceptAll(written).count()
    only_bounded = written.exceptAll(expected).count()
    total = expected.count()
    spark.stop()
    return {
        "bench": "bounded",
        "profile": name,
        "machine": machine(),
        "rows": bounded["input_rows"],
        "output_rows": total,
        "spark_batch": {"before": before, "after": after},
        "bounded": bounded,
        "match": round(1 - (only_batch + only_bounded) / max(total, 1), 6),
        "rows_only_in_spark_batch": only_batch,
        "rows_only_in_bounded": only_bounded,
        "event_hours_per_wall_hour": round((end - start).total_seconds() / bounded["seconds"], 1),
        "ratios": {"bounded_vs_spark_batch": round(bounded["rows_per_s"] / baseline, 3)},
        "params": {"hours": profile["hours"], "impressions_per_hour": profile["impressions_per_hour"],
                   "window": window, "generate_seconds": round(gen_seconds, 1)},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="2 h at 20k impressions/h")
    p.add_argument("--hours", type=float, help="override the profile's hours of data")
    p.add_argument("--profile", choices=sorted(PROFILES), default="dense")
    p.add_argument("--driver-memory", help="the local JVM's memory, e.g. 12g (dense needs more than the default)")
    p.add_argument(
        "--mode", choices=["auto", "bounded"], default="auto",
        help="auto (the default mode: it must choose bounded here, and its proof is timed with the run) or bounded",
    )  # fmt: skip
    return run_measured(p.parse_args(argv), bench, "kappa-bench-bounded-")


if __name__ == "__main__":
    raise SystemExit(main())
